"""What the embedded stack starts ends with it, and one stack at a time runs on a data folder.

Two mechanisms, because a process killed outright (SIGKILL, the OOM killer) runs no code of its own:

- Every process the stack starts (nats-server, the service launcher; the launcher's forks in turn from
  it: zygote.py) gets SIGTERM from the kernel when its parent ends (`PR_SET_PDEATHSIG`, armed in the
  child before it runs anything, and checked against a parent that ended first). The kernel sends it
  when the *thread* that forked the child ends, so the stack forks only from one thread that lives as
  long as its process (`popen`), never from whichever thread happened to call it.
- The data folder's lock (`DataLock`): an exclusive `flock` on `<data>/stack.lock`, taken by the stack
  and inherited by every process it starts, so it is free only once all of them have ended. A second
  stack on the folder refuses to start while the stack holding it runs, and while a stack that died
  leaves processes that have yet to stop (services drain on SIGTERM), waits for them, so that
  nats-server never runs twice on one JetStream store.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

LOCK_FILE = "stack.lock"
_PR_SET_PDEATHSIG = 1
# Resolved here, in the parent: a child between fork and exec should call nothing that may lock.
_prctl = ctypes.CDLL(None, use_errno=True).prctl
_forker: ThreadPoolExecutor | None = None
_forker_lock = threading.Lock()


def die_with_parent(parent: int, death_signal: int = signal.SIGTERM) -> None:
    """In a child of `parent`: `death_signal` when it ends. A parent that ended before this was armed
    has sent nothing; the child then ends at once rather than run orphaned."""
    if _prctl(_PR_SET_PDEATHSIG, death_signal, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGKILL)


def popen(
    args: Sequence[str],
    *,
    keep_fds: Sequence[int] = (),
    death_signal: int = signal.SIGTERM,
    **kwargs: Any,
) -> subprocess.Popen[bytes]:
    """`subprocess.Popen` of a child that ends with this process (`death_signal`: SIGKILL for one that
    ignores SIGTERM), with `keep_fds` open in it. Forked from a thread of its own that lives as long as
    the process (see the module's notes)."""
    global _forker
    with _forker_lock:
        if _forker is None:
            _forker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="regatta-owner")
        forker = _forker
    parent = os.getpid()
    future = forker.submit(
        subprocess.Popen,
        args,
        preexec_fn=lambda: die_with_parent(parent, death_signal),
        pass_fds=tuple(keep_fds),
        **kwargs,
    )
    return future.result()


class DataDirInUse(RuntimeError):
    """Another stack runs on the data folder, or what a dead one started has not stopped yet."""


def start_time(pid: int) -> str | None:
    """The process's start time (clock ticks since boot), which tells it from a later process given
    the same pid; None once it has ended (a zombie has ended)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


def _command(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip() or "?"


class DataLock:
    """The stack's hold on its data folder. The lock file also names the holder and the processes it
    started (`record`), so that a stack refused can say which ones hold the folder."""

    def __init__(self, data_dir: Path, fd: int) -> None:
        self.data_dir = data_dir
        self.fd = fd
        self.processes: dict[str, tuple[int, str]] = {}  # key → (pid, start time)
        self._write()

    def record(self, key: str, pid: int) -> None:
        self.processes[key] = (pid, start_time(pid) or "")
        self._write()

    def release(self) -> None:
        os.close(self.fd)  # free once no process the stack started holds it either

    def _write(self) -> None:
        me = os.getpid()
        text = json.dumps({"pid": me, "started": start_time(me), "processes": self.processes})
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, text.encode(), 0)

    @classmethod
    def take(cls, data_dir: Path, wait: float, say: Callable[[str], None]) -> DataLock:
        """The lock on `data_dir`; DataDirInUse at once if the stack holding it runs, or if what a dead
        stack left still holds it after `wait` seconds."""
        data_dir.mkdir(parents=True, exist_ok=True)
        path = data_dir / LOCK_FILE
        deadline, told = time.monotonic() + wait, False
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
            else:
                return cls(data_dir, fd)
            holder = _holder(path)
            if holder is not None:
                pid, command = holder
                raise DataDirInUse(
                    f"Regatta already runs on {data_dir} (pid {pid}: {command}): stop it first, or "
                    "choose another data folder"
                )
            left = ", ".join(_remnants(path)) or "processes that hold its lock"
            if time.monotonic() >= deadline:
                raise DataDirInUse(
                    f"The stack that ran on {data_dir} ended without stopping what it started, and "
                    f"these still run: {left}. Stop them, then start again."
                )
            if not told:
                say(
                    f"The stack that ran on {data_dir} ended without stopping what it started; waiting "
                    f"up to {wait:.0f} s for it to stop: {left}"
                )
                told = True
            time.sleep(0.2)


def _recorded(path: Path) -> dict[str, Any]:
    with contextlib.suppress(OSError, ValueError):
        recorded = json.loads(path.read_text() or "{}")
        if isinstance(recorded, dict):
            return recorded
    return {}


def _holder(path: Path) -> tuple[int, str] | None:
    """The stack process that took the lock, if it still runs (pid and command)."""
    recorded = _recorded(path)
    pid = recorded.get("pid")
    if isinstance(pid, int) and recorded.get("started") and start_time(pid) == recorded["started"]:
        return pid, _command(pid)
    return None


def _remnants(path: Path) -> list[str]:
    """The processes that hold the lock file open (what a dead stack started), named as it recorded
    them where it did."""
    names = {
        pid: key
        for key, (pid, started) in (_recorded(path).get("processes") or {}).items()
        if start_time(pid) == started
    }
    target = os.stat(path)
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    seen = os.stat(f"/proc/{pid}/fd/{fd}")
                    if (seen.st_dev, seen.st_ino) == (target.st_dev, target.st_ino):
                        found.append(f"{names.get(pid) or _command(pid)} (pid {pid})")
                        break
    return sorted(found)
