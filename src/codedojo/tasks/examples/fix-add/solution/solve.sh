#!/bin/bash
set -e
python3 - <<'PY'
import pathlib
path = pathlib.Path("calc.py")
text = path.read_text()
fixed = text.replace("def add(a, b):\n    return a - b", "def add(a, b):\n    return a + b", 1)
assert fixed != text, "add() not found in the expected form"
path.write_text(fixed)
PY
