#!/bin/bash
ok=1
for pair in 1:0 6:8 7:16 27:111 97:118; do
    n=${pair%%:*}
    want=${pair##*:}
    got="$(timeout 5 python3 /app/collatz.py "$n" 2>/dev/null | tr -d '[:space:]')"
    [ "$got" = "$want" ] || ok=0
done

if [ "$ok" = 1 ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
