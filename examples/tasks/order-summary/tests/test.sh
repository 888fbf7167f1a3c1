#!/bin/bash
python3 - <<'PY'
import json

expected = {"total": 53.0, "by_customer": {"ada": 42.5, "bob": 10.0, "cy": 0.5}}
try:
    with open("/app/summary.json") as f:
        ok = json.load(f) == expected
except Exception:
    ok = False
with open("/logs/verifier/reward.txt", "w") as f:
    f.write("1\n" if ok else "0\n")
PY
