"""The stack's side of its service launcher (zygote.py): asks it for a service process and follows the
processes it forked as the stack followed its own children (pid, poll, wait, return code)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from . import ownership

# A request is answered once the launcher has imported every service: seconds on a loaded machine.
SPAWN_TIMEOUT_SEC = 240.0


class ServiceProcess:
    """A service the launcher forked: what the stack and its tests use of `subprocess.Popen`."""

    def __init__(self, pid: int, args: list[str]) -> None:
        self.pid = pid
        self.args = args
        self.returncode: int | None = None
        self._ended = threading.Event()

    def _exited(self, code: int) -> None:
        self.returncode = code
        self._ended.set()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Launcher:
    """One `python -m regatta.zygote` per stack, started with the stack's environment. It ends with the
    process that started it (ownership.py), and its forks with it; `keep_fds` stay open in them all."""

    def __init__(self, env: dict[str, str], log: Path, keep_fds: Sequence[int] = ()) -> None:
        with log.open("ab") as err:
            self.process = ownership.popen(
                [sys.executable, "-m", "regatta.zygote"],
                keep_fds=keep_fds,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                start_new_session=True,
            )
        assert self.process.stdin is not None and self.process.stdout is not None
        self._requests: IO[bytes] = self.process.stdin
        self._lock = threading.Lock()  # one request at a time: answers come in request order
        self._answer: dict[str, Any] | None = None
        self._answered = threading.Condition()
        self._by_pid: dict[int, ServiceProcess] = {}
        self._early: dict[int, int] = {}  # exits reported before their process was registered
        self._reader = threading.Thread(target=self._read, args=(self.process.stdout,), daemon=True)
        self._reader.start()

    def alive(self) -> bool:
        return self.process.poll() is None

    def spawn(self, key: str, entry: str, env: dict[str, str], log: Path) -> ServiceProcess:
        request = {"key": key, "entry": entry, "env": env, "log": str(log)}
        with self._lock:
            with self._answered:
                self._answer = None
            try:
                self._requests.write((json.dumps(request) + "\n").encode())
                self._requests.flush()
            except (BrokenPipeError, ValueError) as error:
                raise RuntimeError(f"the service launcher is gone ({self._exit_text()})") from error
            with self._answered:
                self._answered.wait_for(lambda: self._answer is not None, SPAWN_TIMEOUT_SEC)
                answer, self._answer = self._answer, None
        if answer is None or answer.get("key") != key:
            raise RuntimeError(f"the service launcher did not start {key} ({self._exit_text()})")
        if "error" in answer:
            raise RuntimeError(f"the service launcher could not start {key}: {answer['error']}")
        process = ServiceProcess(int(answer["pid"]), [sys.executable, "-m", "regatta.zygote", key])
        with self._answered:
            self._by_pid[process.pid] = process
            early = self._early.pop(process.pid, None)
        if early is not None:
            process._exited(early)
        return process

    def _exit_text(self) -> str:
        code = self.process.poll()
        return "still running" if code is None else f"exited with {code}"

    def _read(self, answers: IO[bytes]) -> None:
        for line in answers:
            message = json.loads(line)
            with self._answered:
                if "exited" in message:
                    pid, code = int(message["exited"]), int(message["code"])
                    found = self._by_pid.pop(pid, None)
                    if found is None:
                        self._early[pid] = code
                    else:
                        found._exited(code)
                else:
                    self._answer = message
                    self._answered.notify_all()
        # The launcher ended: its children got their death signal and are no longer anyone's to
        # reap here. Wait for each to be gone, then report it ended (its status is lost).
        with self._answered:
            self._answer = {"key": None}
            self._answered.notify_all()
            orphans = list(self._by_pid.values())
            self._by_pid.clear()
        for process in orphans:
            threading.Thread(target=_await_gone, args=(process,), daemon=True).start()

    def close(self) -> None:
        """Stop the launcher (after the services: those still running get SIGTERM)."""
        with contextlib.suppress(OSError):
            self._requests.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


def _await_gone(process: ServiceProcess) -> None:
    while _running(process.pid):
        time.sleep(0.2)
    process._exited(-signal.SIGTERM)


def _running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie nobody reaped yet has ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")
