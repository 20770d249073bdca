#!/bin/bash
. /tests/lib.sh
score [ "$(cat /app/notes.txt 2>/dev/null)" = "$(printf 'one\ntwo')" -a -f /app/setup-ran -a -f /app/data.txt -a ! -e /tests/only-write.txt ]
