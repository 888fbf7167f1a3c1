#!/bin/bash
# The sentence in instruction.md has 23 words.

if [ "$(tr -d '[:space:]' < /app/count.txt 2>/dev/null)" = "23" ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
