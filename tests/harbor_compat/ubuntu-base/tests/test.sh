#!/bin/bash
if [ "$(cat /app/count 2>/dev/null)" = "$(wc -l < /etc/hostname)" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
