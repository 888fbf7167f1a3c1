#!/bin/bash
expected="$(printf '%s\n' 1 2 Fizz 4 Buzz Fizz 7 8 Fizz Buzz 11 Fizz 13 14 FizzBuzz)"

if [ -x /app/fizzbuzz.sh ] && [ "$(/app/fizzbuzz.sh 15 2>/dev/null)" = "$expected" ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
