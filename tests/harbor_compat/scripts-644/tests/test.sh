#!/bin/bash
if [ "$(cat /app/status 2>/dev/null)" = ok ] && [ -r /tests/expected.txt ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
