#!/bin/bash
printf '%s\n' pear apple fig banana apple cherry fig kiwi date pear grape | LC_ALL=C sort -u > /app/sorted.txt
