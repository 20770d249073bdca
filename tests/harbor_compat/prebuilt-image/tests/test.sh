#!/bin/bash
if [ "$(pwd)" = /srv/app ] && [ "$(cat result.txt 2>/dev/null)" = seeded ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
