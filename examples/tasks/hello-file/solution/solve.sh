#!/bin/bash
echo 'Hello, Regatta!' > /app/hello.txt
