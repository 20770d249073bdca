#!/bin/bash
sed -i 's/return "Hello " + name$/return "Hello, " + name + "!"/' greeting.py
git diff --stat
