#!/usr/bin/env bash
# Starts the Docker engine if it is not running, with the settings the container environment needs.
# The tests need nothing else of the machine: their Postgres and NATS run in containers of their own
# (tests/support/service_containers.py), `make up` runs its own nats-server and SQLite, and the compose
# deployment brings its own Postgres and NATS (compose.yaml).
set -euo pipefail
if command -v dockerd >/dev/null 2>&1; then
  # The engine's settings live in daemon.json (dockerd refuses a setting given both there and as a
  # flag). userns-remap: root in a container is an unprivileged host uid (the `dockremap` user's
  # subordinate range, which dockerd creates); the container environment refuses an engine without it
  # (docs/deployment.md). overlay2: vfs would copy the whole image for every container. Keys already
  # in the file are kept.
  mkdir -p /etc/docker
  python3 - /etc/docker/daemon.json <<'PY'
import json, os, sys
path = sys.argv[1]
config = json.load(open(path)) if os.path.exists(path) and os.path.getsize(path) else {}
wanted = {"userns-remap": "default", "storage-driver": "overlay2", "log-level": "warn"}
merged = {**wanted, **config}
if merged != config:
    with open(path + ".part", "w") as out:
        json.dump(merged, out, indent=2)
        out.write("\n")
    os.replace(path + ".part", path)
PY
  if ! docker info >/dev/null 2>&1; then
    start-stop-daemon --start --oknodo --background --exec "$(command -v dockerd)"
    for _ in $(seq 1 150); do docker info >/dev/null 2>&1 && break; sleep 0.2; done
    docker info >/dev/null 2>&1 || { echo "services: dockerd did not answer within 30 s" >&2; exit 1; }
  fi
  if ! docker info --format '{{json .SecurityOptions}}' | grep -q 'name=userns'; then
    echo "services: the running dockerd does not remap user namespaces; restart it to apply" \
      "/etc/docker/daemon.json (the container environment refuses to run without it)" >&2
  fi
fi
