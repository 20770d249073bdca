#!/bin/bash
# Hidden tests for greeting.py; reward 1 only if both pass.
mkdir -p /tmp/grading && cp /tests/test_greeting.py /tmp/grading/
cd /app || exit 0
PYTHONPATH=/app python3 -m pytest -p no:cacheprovider -q /tmp/grading/test_greeting.py
status=$?
if [ $status -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
