"""`python -m regatta.multihost --database-url postgresql+psycopg://… [--hosts 2] [--root DIR]`: the
multi-host deployment on this machine (as root) until Ctrl-C, then torn down leaving nothing behind.
Prints the gateway's URL and admin token, each host's Docker socket and the NATS URLs."""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path

from .cluster import Cluster


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m regatta.multihost", description=__doc__)
    parser.add_argument("--database-url", required=True, help="the event store (Postgres), as DATABASE_URL")
    parser.add_argument("--hosts", type=int, default=2, choices=range(1, 9), metavar="1-8")
    parser.add_argument("--root", type=Path, default=Path(".regatta-multihost"), help="state and logs")
    args = parser.parse_args()
    cluster = Cluster(args.root, args.database_url)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        cluster.start(hosts=args.hosts)
        assert cluster.nats is not None
        print(f"gateway   {cluster.url}  (token in {args.root / 'control' / 'token'})")
        print(f"nats      {','.join(f'{cluster.nats.host}:{port}' for port in cluster.nats.client_ports)}")
        for host in cluster.hosts.values():
            print(f"{host.name}  DOCKER_HOST=unix://{host.docker_socket}  logs {host.state / 'logs'}")
        print("Ctrl-C tears it all down.", flush=True)
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        cluster.teardown()


if __name__ == "__main__":
    main()
