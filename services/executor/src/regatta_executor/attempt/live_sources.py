"""Where the live view (live_output.py) reads an attempt's log folders from: the host's folder (the
`local` environment's, bind-mounted, and every environment's once the attempt's logs were brought back),
or, in an environment whose folders are elsewhere while the attempt runs (the `container` environment),
copies read from the sandbox while someone watches (`SandboxPoll`).

Cost: a read of the sandbox's folder is an engine round trip (about 40 ms of the engine's CPU and more
with the folder's size: docs/performance.md), so it is made only while a watcher's heartbeat was heard
lately (`Watching`, regatta_shared.messaging.live), at most once a second, twice as far apart (up to
`MAX_INTERVAL`) each time nothing changed, and never more often than ten times its own duration. The
offsets of what was sent are kept by file name, so when nobody watched the first read sends what was
written until then (within the caps), and the host's copy brought back at the end carries on from there.

The folders are written by the agent, so they are read as hostile: on the host, regular files only,
opened without following links and without blocking (a FIFO); from the sandbox, the regular files of the
engine's archive only (links and FIFOs are entries without content there); a bounded number of them.
"""

from __future__ import annotations

import os
import stat
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from regatta_shared.messaging.live import WATCH_EVERY

# Entries of a folder looked at per tick, and the log files of them followed.
SCANNED = 256
FOLLOWED = 32
# Rewritten whole as they change, not appended to: not followed as logs (the trajectory's steps are sent).
NOT_LOGS = (".json",)
# The sandbox's folders read while watched: at least this far apart, up to MAX_INTERVAL while nothing
# changes, and a read at most this share of the time.
MIN_INTERVAL = 1.0
MAX_INTERVAL = 5.0
COST_SHARE = 0.1
# An attempt counts as watched this long after a watcher's last heartbeat (a few missed ones).
WATCHED_FOR = 2.5 * WATCH_EVERY

Stamp = tuple[int, int]


class Folder(Protocol):
    def names(self) -> list[str]:
        """The log files in the folder (regular files, not NOT_LOGS), sorted, at most FOLLOWED."""
        ...

    def read_new(self, name: str, offset: int, limit: int) -> tuple[bytes, int]:
        """Up to `limit` bytes of `name` from `offset`, and the file's size (-1 if not there)."""
        ...

    def read_whole(self, name: str, limit: int) -> tuple[bytes | None, Stamp | None]:
        """`name` whole and a stamp that changes with it if it has at most `limit` bytes; only the stamp
        if it is larger; (None, None) if it is not there."""
        ...


class HostFolder:
    """A folder on this host, opened afresh at every read (it may not exist yet)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def names(self) -> list[str]:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return []
        try:
            names = []
            with os.scandir(fd) as entries:
                for index, entry in enumerate(entries):
                    if index >= SCANNED:
                        break
                    if entry.name.endswith(NOT_LOGS) or not entry.is_file(follow_symlinks=False):
                        continue
                    names.append(entry.name)
            return sorted(names)[:FOLLOWED]
        finally:
            os.close(fd)

    def _open(self, name: str) -> int | None:
        try:
            dir_fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            return os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError:
            return None
        finally:
            os.close(dir_fd)

    def read_new(self, name: str, offset: int, limit: int) -> tuple[bytes, int]:
        fd = self._open(name)
        if fd is None:
            return b"", -1
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return b"", -1
            if info.st_size <= offset or limit <= 0:
                return b"", info.st_size
            return os.pread(fd, min(limit, info.st_size - offset), offset), info.st_size
        finally:
            os.close(fd)

    def read_whole(self, name: str, limit: int) -> tuple[bytes | None, Stamp | None]:
        fd = self._open(name)
        if fd is None:
            return None, None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return None, None
            stamp = (info.st_size, info.st_mtime_ns)
            if info.st_size > limit:
                return None, stamp
            return os.pread(fd, info.st_size, 0), stamp
        finally:
            os.close(fd)


class CopiedFolder:
    """A folder's regular files as read from the sandbox at one moment."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files

    def names(self) -> list[str]:
        return sorted(name for name in self.files if not name.endswith(NOT_LOGS))[:FOLLOWED]

    def read_new(self, name: str, offset: int, limit: int) -> tuple[bytes, int]:
        data = self.files.get(name)
        if data is None:
            return b"", -1
        return (data[offset : offset + limit] if limit > 0 else b""), len(data)

    def read_whole(self, name: str, limit: int) -> tuple[bytes | None, Stamp | None]:
        data = self.files.get(name)
        if data is None:
            return None, None
        stamp = (len(data), zlib.crc32(data))
        return (data if len(data) <= limit else None), stamp


@runtime_checkable
class SandboxLogs(Protocol):
    """An environment whose log folders are read from its sandbox while watched (the container's)."""

    def live_folder(self) -> str | None:
        """Which folder may be read now, without a round trip: "agent" while the agent's turn runs,
        "verifier" while the verifier's does, None otherwise."""
        ...

    async def read_live_folder(self, kind: str) -> dict[str, bytes] | None:
        """That folder's regular files by name (None if it cannot be read now): one engine round trip."""
        ...


class Watching:
    """Whether a watcher's heartbeat (regatta_shared.messaging.live.watch_subject) was heard lately."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._until = float("-inf")

    async def heard(self, _msg: Any = None) -> None:
        self._until = self._clock() + WATCHED_FOR

    def __call__(self) -> bool:
        return self._clock() < self._until


class SandboxPoll:
    """The sandbox's agent and verifier folders as last read, read again when due and watched. A folder
    that may no longer be read (the agent's turn is over) is forgotten at once: the host's copy, brought
    back by then or soon, answers for it."""

    def __init__(
        self,
        sandbox: SandboxLogs,
        watched: Callable[[], bool],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sandbox = sandbox
        self._watched = watched
        self._clock = clock
        self.copies: dict[str, CopiedFolder] = {}
        self._interval = MIN_INTERVAL
        self._due = float("-inf")
        # Engine round trips made (reads), for the cost figures (docs/performance.md).
        self.reads = 0

    def copy(self, kind: str) -> CopiedFolder | None:
        return self.copies.get(kind)

    async def refresh(self) -> None:
        kind = self._sandbox.live_folder()
        for other in [k for k in self.copies if k != kind]:
            del self.copies[other]
        if kind is None or not self._watched():
            return
        now = self._clock()
        if now < self._due:
            return
        self.reads += 1
        files = await self._sandbox.read_live_folder(kind)
        took = self._clock() - now
        previous = self.copies.get(kind)
        changed = files is not None and (previous is None or previous.files != files)
        if files is not None and self._sandbox.live_folder() == kind:
            self.copies[kind] = CopiedFolder(files)
        self._interval = MIN_INTERVAL if changed else min(MAX_INTERVAL, self._interval * 2)
        self._due = self._clock() + max(self._interval, took / COST_SHARE)
