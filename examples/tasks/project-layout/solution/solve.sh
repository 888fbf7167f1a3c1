#!/bin/bash
mkdir -p /app/project/src /app/project/tests
echo '# demo' > /app/project/README.md
printf '#!/usr/bin/env python3\nprint("ok")\n' > /app/project/src/main.py
chmod +x /app/project/src/main.py
