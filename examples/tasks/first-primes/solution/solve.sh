#!/bin/bash
python3 - <<'PY' > /app/primes.txt
primes = []
n = 2
while len(primes) < 25:
    if all(n % p for p in primes):
        primes.append(n)
    n += 1
print("\n".join(map(str, primes)))
PY
