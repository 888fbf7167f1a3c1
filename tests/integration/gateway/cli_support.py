"""The real `regatta` CLI in a subprocess against the test's gateway app served on a socket."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import uvicorn

from regatta import nats_server

from .conftest import ADMIN_TOKEN, Gateway


@contextmanager
def served(gateway: Gateway) -> Iterator[str]:
    """The gateway app behind uvicorn too (its lifespan already run by the test client); yields its URL."""
    port = nats_server.free_port()
    server = uvicorn.Server(
        uvicorn.Config(gateway.client.app, host="127.0.0.1", port=port, log_level="error", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "the gateway did not start"
        time.sleep(0.1)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def regatta(
    url: str, *args: str, token: str = ADMIN_TOKEN, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """The CLI as `token`'s user in their default workspace; stdin is a pipe (never a terminal)."""
    env = {**os.environ, "REGATTA_URL": url, "REGATTA_TOKEN": token, "COLUMNS": "200"}
    env.pop("REGATTA_WORKSPACE", None)
    return subprocess.run(
        [sys.executable, "-m", "regatta.cli", *args],
        env=env,
        input=stdin or "",
        capture_output=True,
        text=True,
        timeout=120,
    )


def regatta_on_terminal(url: str, *args: str, typed: str, token: str = ADMIN_TOKEN) -> tuple[int, str]:
    """The CLI with a pseudo-terminal for stdin and stdout, as when a person runs it; `typed` is what they
    type. Returns the exit code and everything the terminal showed."""
    env = {**os.environ, "REGATTA_URL": url, "REGATTA_TOKEN": token, "COLUMNS": "200", "TERM": "dumb"}
    env.pop("REGATTA_WORKSPACE", None)
    main, child = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "regatta.cli", *args], env=env, stdin=child, stdout=child, stderr=child
    )
    os.close(child)
    os.write(main, typed.encode())  # held by the terminal until the CLI reads it
    shown = b""
    while True:
        try:
            chunk = os.read(main, 4096)
        except OSError:  # EIO: the CLI exited and closed its end
            break
        if not chunk:
            break
        shown += chunk
    os.close(main)
    return process.wait(timeout=120), shown.decode(errors="replace").replace("\r\n", "\n")
