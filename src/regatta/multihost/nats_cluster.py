"""Three nats-servers with JetStream, routed into one cluster, listening on the multi-host bridge's
address: streams and buckets at three replicas (REGATTA_NATS_REPLICAS=3) survive one server's loss.
Each server keeps its own store folder, so a server killed and started again rejoins with its data."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import nats

from regatta import nats_server, ownership

SIZE = 3


def free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


@dataclass
class NatsCluster:
    root: Path
    host: str  # the address every server listens on (the bridge's)
    passwords: dict[str, str] = field(default_factory=dict)
    client_ports: list[int] = field(default_factory=list)
    route_ports: list[int] = field(default_factory=list)
    processes: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.passwords = self.passwords or nats_server.ensure_credentials(self.root)
        if not self.client_ports:
            self.client_ports = [free_port(self.host) for _ in range(SIZE)]
            self.route_ports = [free_port(self.host) for _ in range(SIZE)]

    def urls(self, user: str) -> str:
        """Every server's URL for `user`, comma separated (NATS_URL): a client fails over among them."""
        password = self.passwords[user]
        return ",".join(nats_server.url(port, user, password, self.host) for port in self.client_ports)

    def config(self, index: int) -> str:
        routes = [f"nats-route://{self.host}:{port}" for i, port in enumerate(self.route_ports) if i != index]
        config = {
            "server_name": f"n{index}",
            "host": self.host,
            "port": self.client_ports[index],
            "jetstream": {"store_dir": str(self.root / f"n{index}" / "store")},
            "cluster": {
                "name": "regatta",
                "host": self.host,
                "port": self.route_ports[index],
                "routes": routes,
            },
            "authorization": nats_server.authorization(self.passwords),
        }
        return json.dumps(config, indent=2) + "\n"

    def start(self, index: int) -> None:
        folder = self.root / f"n{index}"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / nats_server.CONFIG_FILE
        nats_server.write_private(path, self.config(index))
        log = (folder / "nats-server.log").open("ab")
        # Ends with this process, however it ends.
        self.processes[index] = ownership.popen(
            [nats_server.binary(), "-c", str(path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()

    def start_all(self) -> None:
        for index in range(SIZE):
            self.start(index)
        self.wait_ready()

    def kill(self, index: int) -> None:
        """SIGKILL one server (its store stays for `start`)."""
        process = self.processes[index]
        process.kill()
        process.wait(timeout=30)

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until JetStream answers through every running server (a meta leader is elected)."""
        deadline = time.monotonic() + timeout
        for index, process in self.processes.items():
            if process.poll() is not None:
                continue
            url = nats_server.url(self.client_ports[index], "admin", self.passwords["admin"], self.host)
            while not asyncio.run(_jetstream_answers(url)):
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"NATS server n{index} did not answer with JetStream in {timeout:.0f} s"
                    )
                time.sleep(0.2)

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
        for process in self.processes.values():
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


async def _quiet(_error: Exception) -> None:
    """A server not answering yet is what the caller polls for, not an error to log."""


async def _jetstream_answers(url: str) -> bool:
    try:
        client = await nats.connect(
            url, connect_timeout=1, max_reconnect_attempts=0, allow_reconnect=False, error_cb=_quiet
        )
    except Exception:
        return False
    try:
        await client.jetstream().account_info()
        return True
    except Exception:
        return False
    finally:
        await client.close()
