#!/bin/bash
if [ -f /app/done ] && [ -n "$TOKEN" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
