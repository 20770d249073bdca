#!/bin/bash
# Two scores and no "reward" key, as in Harbor's cookbook.
correct=0; perf=0
if [ "$(cat /app/answer.txt 2>/dev/null)" = fast ]; then correct=1; perf=0.5; fi
printf '{"correctness": %s, "performance": %s}\n' "$correct" "$perf" > /logs/verifier/reward.json
