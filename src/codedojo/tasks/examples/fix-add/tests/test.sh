#!/bin/bash
# Runs the hidden tests against /app and writes reward.json: reward 1 only if every listed test passes,
# plus the fraction of fail-to-pass and pass-to-pass tests that pass.
cd /app || exit 0
mkdir -p /tmp/grading && cp /tests/test_calc.py /tmp/grading/
PYTHONPATH=/app python3 -m pytest -p no:cacheprovider -rA /tmp/grading/test_calc.py > /tmp/grading/log.txt 2>&1
cat /tmp/grading/log.txt
python3 - <<'PY'
import json, re
log = open("/tmp/grading/log.txt").read()
passed = set(re.findall(r"^PASSED \S*?(test_calc\.py::\w+)", log, re.M))
f2p = ["test_calc.py::test_add", "test_calc.py::test_add_negative"]
p2p = ["test_calc.py::test_sub", "test_calc.py::test_mul"]
f = sum(t in passed for t in f2p) / len(f2p)
p = sum(t in passed for t in p2p) / len(p2p)
json.dump({"reward": float(f == 1 and p == 1), "fail_to_pass": f, "pass_to_pass": p},
          open("/logs/verifier/reward.json", "w"))
PY
