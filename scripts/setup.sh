#!/usr/bin/env bash
# Installs everything Regatta needs on a fresh Debian machine: system packages, uv, the workspace.
# Idempotent and quiet when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

# busybox-static: the container environment's platform tools (container/exec/tools.py); dnsmasq-base and
# ipset: its sandbox networks' DNS forwarder and allowlists (container/network/dns.py, allowlist.py).
packages=(bubblewrap tmux util-linux procps slirp4netns iproute2 busybox-static dnsmasq-base ipset)
if [ "${REGATTA_SETUP_TEST_DEPS:-0}" = "1" ]; then
  # The container environment's tests: a Docker engine, and debootstrap to make their base image
  # offline (scripts/test-image.sh); slirp4netns and passt for user-mode networking.
  packages+=(docker-compose chromium docker.io iptables debootstrap slirp4netns passt)
  # npm, unless a Node.js install brought its own: the AsyncAPI schema below.
  command -v npm >/dev/null 2>&1 || packages+=(npm)
fi
missing=()
for package in "${packages[@]}"; do
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# .python-version pins 3.12 (Harbor needs it); pyenv's `python` honours it.
PYTHON=${PYTHON:-python}
if ! "$PYTHON" -m uv --version >/dev/null 2>&1; then
  echo "setup: installing uv"
  "$PYTHON" -m pip install -q uv
fi
"$PYTHON" -m uv sync --frozen --all-packages -q

if [ "${REGATTA_SETUP_TEST_DEPS:-0}" = "1" ]; then
  # The AsyncAPI 3.0 JSON schema, from its publisher's package, for tests/unit/test_asyncapi.py.
  specs=.tools/asyncapi/node_modules/@asyncapi/specs/package.json
  if ! grep -q '"version": "6.11.1"' "$specs" 2>/dev/null; then
    echo "setup: installing @asyncapi/specs"
    npm install --silent --no-audit --no-fund --no-save --prefix .tools/asyncapi @asyncapi/specs@6.11.1 >/dev/null
  fi
fi
