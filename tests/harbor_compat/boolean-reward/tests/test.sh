#!/bin/bash
if [ -f /app/flag ]; then v=true; else v=false; fi
echo "{\"passed\": $v}" > /logs/verifier/reward.json
