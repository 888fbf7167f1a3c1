#!/bin/bash
# Writes reward.json (two metrics) instead of reward.txt.
reward=0
style=0
if [ -x /app/rot13.sh ]; then
    out="$(printf 'Hello, World! 123\nabcxyz\n' | /app/rot13.sh 2>/dev/null)"
    if [ "$out" = "$(printf 'Uryyb, Jbeyq! 123\nnopklm')" ]; then
        reward=1
    fi
    if head -n 1 /app/rot13.sh | grep -q '^#!'; then
        style=0.5
    fi
    if /app/rot13.sh --help 2>&1 < /dev/null | grep -qi usage; then
        style=$(python3 -c "print($style + 0.5)")
    fi
fi
printf '{"reward": %s, "style": %s}\n' "$reward" "$style" > /logs/verifier/reward.json
