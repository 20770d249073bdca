#!/bin/bash
if [ "$(stat -c %u /app/mine 2>/dev/null)" = 1000 ] && [ "$(id -u)" = 0 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
