"""The embedded stack's service launcher (regatta.zygote, regatta.launcher): a service it forks is a
process of its own (pid, session, environment, log), its exit status reaches the stack as a child's
would (a signal as its negative number), and services end when the launcher does, as they end with
the stack. The stack's own behaviour (kills, restarts, a crash of each service) is in tests/e2e."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from regatta.launcher import Launcher
from regatta.services import BY_NAME


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[Launcher]:
    started = Launcher(dict(os.environ), tmp_path / "launcher.log")
    yield started
    started.close()


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    # No NATS answers there: a service waits for it (and retries) until it is stopped.
    return {
        **os.environ,
        "NATS_URL": f"nats://127.0.0.1:{_closed_port()}",
        "REGATTA_DATA_DIR": str(tmp_path / "data"),
        "REGATTA_HEALTH_PORT": str(_closed_port()),
        **extra,
    }


def test_a_forked_service_is_a_process_of_its_own(launcher: Launcher, tmp_path: Path) -> None:
    logs = {name: tmp_path / f"{name}.log" for name in ("relay", "scoring")}
    ports = {name: _closed_port() for name in logs}
    started = {
        name: launcher.spawn(
            name,
            BY_NAME[name].main_module,
            _env(tmp_path, NATS_URL=f"nats://127.0.0.1:{ports[name]}"),
            logs[name],
        )
        for name in logs
    }
    relay, other = started["relay"], started["scoring"]

    assert relay.pid != other.pid and relay.poll() is None and other.poll() is None
    assert os.getsid(relay.pid) == relay.pid, "a session of its own, so the stack can signal its group"
    # Each runs with its own environment and writes its own log: each tried the NATS it was given.
    for name, port in ports.items():
        deadline = time.monotonic() + 60
        while f"'127.0.0.1', {port})" not in _text(logs[name]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert f"'127.0.0.1', {port})" in _text(logs[name]), name
    assert str(ports["scoring"]) not in _text(logs["relay"])

    os.killpg(relay.pid, signal.SIGKILL)
    assert relay.wait(timeout=30) == -signal.SIGKILL
    assert other.poll() is None, "only the killed one ended"
    os.killpg(other.pid, signal.SIGTERM)
    assert other.wait(timeout=30) == 0, "a service still waiting for NATS stops cleanly at SIGTERM"


def _text(log: Path) -> str:
    """The log so far: a service opens it only once it has started, which may be after spawn returns."""
    try:
        return log.read_text()
    except FileNotFoundError:
        return ""


def _ignored_signals(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("SigIgn:")).split()[1], 16)


def test_a_forked_service_ignores_sigpipe_as_a_python_process_does(
    launcher: Launcher, tmp_path: Path
) -> None:
    """A service started with `python -m` ignores SIGPIPE (the interpreter's default): a write to a
    socket whose peer died (NATS killed mid-write) raises an error it handles. A forked one must too;
    with SIGPIPE at its default action, such a write killed the executor (exit -13)."""
    bit = 1 << (signal.SIGPIPE - 1)
    plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.5)
        assert _ignored_signals(plain.pid) & bit
    finally:
        plain.kill()
        plain.wait()
    log = tmp_path / "relay.log"
    service = launcher.spawn("relay", BY_NAME["relay"].main_module, _env(tmp_path), log)
    # Its signals are its own once it opens its log: before, they may still be the launcher's.
    deadline = time.monotonic() + 60
    while not log.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert log.exists() and _ignored_signals(service.pid) & bit
    finally:
        os.killpg(service.pid, signal.SIGKILL)
        service.wait(timeout=30)


def test_a_service_that_cannot_start_reports_its_exit_status(launcher: Launcher, tmp_path: Path) -> None:
    log = tmp_path / "broken.log"
    env = _env(tmp_path, REGATTA_HEALTH_PORT="not-a-port")
    broken = launcher.spawn("relay", BY_NAME["relay"].main_module, env, log)
    assert broken.wait(timeout=60) not in (None, 0)
    assert "REGATTA_HEALTH_PORT" in log.read_text()


def test_services_end_when_their_launcher_ends(launcher: Launcher, tmp_path: Path) -> None:
    relay = launcher.spawn("relay", BY_NAME["relay"].main_module, _env(tmp_path), tmp_path / "relay.log")
    assert relay.poll() is None
    launcher.process.kill()  # as when the stack's process dies: no orderly stop
    relay.wait(timeout=60)
    assert not Path(f"/proc/{relay.pid}").exists() or "Z" in Path(f"/proc/{relay.pid}/stat").read_text()
