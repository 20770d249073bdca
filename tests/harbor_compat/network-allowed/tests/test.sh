#!/bin/bash
if awk 'NR > 1 && $2 == "00000000" { found = 1 } END { exit !found }' /proc/net/route && [ -f /app/done ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
