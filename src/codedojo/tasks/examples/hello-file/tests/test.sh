#!/bin/bash
# Reward 1 when /app/hello.txt holds exactly the line "world", else 0.
if [ -f /app/hello.txt ] && [ "$(cat /app/hello.txt)" = "world" ]; then
    echo "hello.txt is correct"
    echo 1 > /logs/verifier/reward.txt
else
    echo "hello.txt is missing or wrong: $(head -c 200 /app/hello.txt 2>&1)"
    echo 0 > /logs/verifier/reward.txt
fi
