#!/bin/bash
. /tests/lib.sh
score [ "$(cat /app/notes.txt 2>/dev/null)" = one ]
