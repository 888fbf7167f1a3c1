#!/bin/bash
cat > /app/rot13.sh <<'SCRIPT'
#!/bin/bash
tr 'A-Za-z' 'N-ZA-Mn-za-m'
SCRIPT
chmod +x /app/rot13.sh
