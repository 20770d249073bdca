#!/bin/bash
if [ "$(cat /app/out.txt 2>/dev/null)" = "hello $EXPECTED x-\${HOME}" ] && [ "$MODE" = strict ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
