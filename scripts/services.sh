#!/usr/bin/env bash
# Starts the machine's Postgres, NATS and Docker engine if they are not running (tests use all three).
set -euo pipefail
if command -v pg_ctlcluster >/dev/null 2>&1 && ! pg_isready -q -h 127.0.0.1 -p 5432; then
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start
  for _ in $(seq 1 50); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.2; done
fi
if [ -x /usr/sbin/nats-server ] && ! (exec 3<>/dev/tcp/127.0.0.1/4222) 2>/dev/null; then
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- \
    -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log
fi
if command -v dockerd >/dev/null 2>&1 && ! docker info >/dev/null 2>&1; then
  # overlay2: vfs would copy the whole image for every container.
  start-stop-daemon --start --oknodo --background --exec "$(command -v dockerd)" -- \
    --storage-driver=overlay2 --log-level=warn
  for _ in $(seq 1 150); do docker info >/dev/null 2>&1 && break; sleep 0.2; done
  docker info >/dev/null 2>&1 || { echo "services: dockerd did not answer within 30 s" >&2; exit 1; }
fi
