#!/bin/bash
if [ "$(head -n 1 /app/project/README.md 2>/dev/null)" = "# demo" ] && [ -d /app/project/tests ] && [ -x /app/project/src/main.py ] && [ "$(/app/project/src/main.py 2>/dev/null)" = "ok" ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
