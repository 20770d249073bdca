#!/bin/bash
# Four cases; reward.json holds the fraction that pass (reward) and whether all do (all_pass).
cd /app || exit 0
work=$(mktemp -d)
printf '3\n-1\n10\n' > "$work/a"; printf '' > "$work/b"; printf '5\n\n5\n' > "$work/c"; seq 1 100 > "$work/d"
passed=0
for case in "a 12" "b 0" "c 10" "d 5050"; do
    set -- $case
    got=$(timeout 10 ./sum.sh "$work/$1" 2>/dev/null)
    if [ "$got" = "$2" ]; then passed=$((passed + 1)); echo "case $1 ok"; else echo "case $1: expected $2, got '$got'"; fi
done
all=0; [ $passed -eq 4 ] && all=1
printf '{"reward": %s, "all_pass": %s}\n' "$(awk "BEGIN {print $passed / 4}")" "$all" > /logs/verifier/reward.json
