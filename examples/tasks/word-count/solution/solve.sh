#!/bin/bash
echo 'The quick brown fox jumps over the lazy dog while the small cat sleeps in the warm afternoon sun and dreams of fish' | wc -w > /app/count.txt
