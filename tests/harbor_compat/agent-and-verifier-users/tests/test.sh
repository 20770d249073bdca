#!/bin/bash
if [ "$(stat -c %U /app/who.txt 2>/dev/null)" = agent ] && [ "$(cat /app/who.txt)" = agent ] && [ "$(id -un)" = grader ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
