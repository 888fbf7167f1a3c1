#!/bin/bash
s=0
for i in $(seq 1 100); do s=$((s + i * i)); done
echo "$s" > /app/answer.txt
