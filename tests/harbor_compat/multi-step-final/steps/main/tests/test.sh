#!/bin/bash
if [ -f /app/final ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
