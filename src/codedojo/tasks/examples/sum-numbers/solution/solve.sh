#!/bin/bash
cat > sum.sh <<'SCRIPT'
#!/bin/bash
awk 'NF { total += $1 } END { print total + 0 }' "$1"
SCRIPT
chmod +x sum.sh
