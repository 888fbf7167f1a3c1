#!/bin/bash
expected='apple
banana
cherry
date
fig
grape
kiwi
pear'

if [ "$(cat /app/sorted.txt 2>/dev/null)" = "$expected" ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
