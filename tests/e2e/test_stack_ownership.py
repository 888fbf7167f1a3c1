"""Issue 37, finding 1: `regatta up` owns what it starts. Killed without a chance to stop them (SIGKILL,
as the OOM killer does), its nats-server and every service it forked end with it; a `regatta up` on the
same data folder meanwhile waits for them to be gone and then runs the only nats-server on that folder's
JetStream store; and one started while a stack runs on the folder says so and stops.

The processes are found from the test's own `regatta up` (its descendants, by pid and start time) and,
for the nats-server, by the data folder its command line names: a path of this test's alone."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest

from regatta import nats_server
from tests.conftest import ROOT
from tests.support.processes import descendants

pytestmark = pytest.mark.timeout(420)

REGATTA = str(ROOT / ".venv/bin/regatta")
# The stack's own choices, not the test session's; COLUMNS (pytest sets it) would wrap what it says.
UNSET = ("REGATTA_TOKEN", "REGATTA_URL", "NATS_URL", "DATABASE_URL", "REGATTA_NATS_PORT", "COLUMNS")


class Up:
    """A real `regatta up` on `data`, its output read line by line."""

    def __init__(self, data: Path, state: Path, **extra: str) -> None:
        self.port = nats_server.free_port()
        env = {
            **os.environ,
            "REGATTA_DATA_DIR": str(data),
            "REGATTA_EXECUTOR_ENVIRONMENT": "local",
            "REGATTA_HOSTED_BENCHMARKS": "[]",
            "XDG_STATE_HOME": str(state),
            **extra,
        }
        for name in UNSET:
            env.pop(name, None)
        self.process = subprocess.Popen(
            [REGATTA, "up", "--executors", "1", "--port", str(self.port)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            # Its own group, so the test's signals reach only what it means them for.
            start_new_session=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.said: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def wait_for_line(self, prefix: str, timeout: float = 240.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=1.0)
            except queue.Empty:
                continue
            if line is None:
                break
            self.said.append(line)
            if line.startswith(prefix):
                return line
        raise AssertionError(f"`regatta up` never said {prefix!r}; it said:\n{''.join(self.said)}")

    def output_until_exit(self, timeout: float = 120.0) -> str:
        self.process.wait(timeout=timeout)
        while (line := self.lines.get(timeout=10)) is not None:
            self.said.append(line)
        return "".join(self.said)

    def healthy(self) -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=120)


def _start_time(pid: int) -> str | None:
    """The process's start time (field 22 of its stat), which tells it from a later one with its pid;
    None once it has ended (a zombie has ended: only its exit status waits to be read)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


def _alive(processes: dict[int, tuple[str, str]]) -> dict[int, str]:
    """Those of `processes` (pid → (start time, command)) still running."""
    return {pid: command for pid, (started, command) in processes.items() if _start_time(pid) == started}


def _stack_processes(up: Up) -> dict[int, tuple[str, str]]:
    found = {}
    for pid, process in descendants([up.process.pid]).items():
        started = _start_time(pid)
        if started is not None:
            found[pid] = (started, process.command)
    return found


def _nats_servers(data: Path) -> list[int]:
    """Every nats-server on the machine started with this data folder's configuration."""
    config = str(data.resolve() / "nats" / nats_server.CONFIG_FILE)
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or _start_time(int(entry)) is None:
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and Path(argv[0].decode(errors="replace")).name == "nats-server" and config.encode() in argv:
            found.append(int(entry))
    return found


def _wait_until(predicate, timeout: float, every: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every)
    return bool(predicate())


def _holding(processes: dict[int, tuple[str, str]], path: Path) -> int:
    """The one of `processes` that has `path` open (a service writes its own log)."""
    for pid in processes:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                if Path(os.readlink(fd)) == path:
                    return pid
            except OSError:
                continue
    raise AssertionError(f"no process has {path} open")


def test_a_killed_stack_leaves_nothing_behind_and_a_restart_runs_one_nats_server(tmp_path: Path) -> None:
    """SIGKILL of `regatta up` with one of its services held stopped (SIGSTOP: a service that takes its
    time to stop, as an executor draining an attempt does): everything else it started ends at once; a
    `regatta up` started right away waits for the held one, naming it, with no nats-server running on
    the store meanwhile, and gives up when the wait is over; once the held one goes on (and stops at
    its SIGTERM), a new `regatta up` runs and its nats-server is the only one on the folder."""
    data = tmp_path / "data"
    state = tmp_path / "state"
    first = Up(data, state)
    later: list[Up] = []
    held = None
    try:
        first.wait_for_line("Try:")
        processes = _stack_processes(first)
        commands = " ".join(command for _, command in processes.values())
        assert "nats-server" in commands and "regatta.zygote" in commands, commands
        # The launcher and its forks (each service, the executor's among them), and the bus.
        assert len(processes) >= 8, processes
        assert len(_nats_servers(data)) == 1
        held = _holding(processes, data.resolve() / "logs" / "relay.log")

        os.kill(held, signal.SIGSTOP)
        os.kill(first.process.pid, signal.SIGKILL)  # as the OOM killer does: no handler runs
        first.process.wait(timeout=30)
        # At once, as a supervisor restarting it would; its wait is short (grace 0 + 30 s to stop).
        hurried = Up(data, state, REGATTA_EXECUTOR_GRACE_SEC="0")
        later.append(hurried)
        waiting = " ".join(hurried.wait_for_line("The stack that ran on", timeout=120).split())
        assert f"relay (pid {held})" in waiting, waiting
        # Everything else the killed one started ends: the services at their SIGTERM, the bus too.
        assert _wait_until(lambda: set(_alive(processes)) == {held}, timeout=60), _alive(processes)
        assert _nats_servers(data) == [], "no server on the store while the old stack's processes run"
        said = " ".join(hurried.output_until_exit(timeout=120).split())
        assert hurried.process.returncode == 1, said
        assert f"these still run: relay (pid {held}). Stop them, then start again." in said, said
        assert _nats_servers(data) == []

        restarted = Up(data, state)
        later.append(restarted)
        restarted.wait_for_line("The stack that ran on", timeout=120)
        os.kill(held, signal.SIGCONT)  # its pending SIGTERM now stops it
        assert _wait_until(lambda: not _alive(processes), timeout=60), _alive(processes)
        held = None
        restarted.wait_for_line("Try:")
        assert restarted.healthy()
        servers = _nats_servers(data)
        assert len(servers) == 1, servers
        assert servers[0] in descendants([restarted.process.pid]), "the new stack's own"
    finally:
        if held is not None:
            os.kill(held, signal.SIGCONT)
        for up in (first, *later):
            up.stop()
    assert _nats_servers(data) == []


def test_a_second_stack_on_a_running_stacks_data_says_so_and_stops(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = Up(data, tmp_path / "state")
    try:
        first.wait_for_line("Try:")
        servers = _nats_servers(data)
        second = Up(data, tmp_path / "state")
        said = second.output_until_exit(timeout=60)
        assert second.process.returncode == 1, said
        said = " ".join(said.split())
        assert f"Regatta already runs on {data.resolve()} (pid {first.process.pid}: " in said, said
        assert _nats_servers(data) == servers, "no second server, and the first one untouched"
        assert first.healthy() and first.process.poll() is None
    finally:
        first.stop()
    assert _nats_servers(data) == []
