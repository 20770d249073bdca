#!/bin/bash
printf '%s %s %s\n' "$GREETING" "$ANSWER" "$LITERAL" > /app/out.txt
