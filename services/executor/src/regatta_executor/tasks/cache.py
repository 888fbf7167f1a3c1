"""Task files arrive from the NATS object store by content digest and are unpacked once per host.

The cache is bounded in size: past `max_bytes` of unpacked files, the least recently used digests are
deleted. A digest in use is never deleted, by this process or by another executor sharing the folder:
each use holds a shared `flock` on the digest's lock file, and the pruner deletes only a digest whose
lock it can take exclusively (without waiting). Each unpack is bounded too
(regatta_shared.security.task_archives).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

from nats.js.object_store import ObjectStore
from regatta_shared.rules.ceilings import TaskFileBounds
from regatta_shared.security.task_archives import TaskArchiveRefused, discard, unpack_bounded

from ..digest_locks import DigestLocks

_LOCK = ".lock"
_SIZE = ".size-"  # one per unpacked name: the bytes it holds


class TaskCache:
    def __init__(self, root: Path, store: ObjectStore, bounds: TaskFileBounds, max_bytes: int) -> None:
        self.root = root
        self.store = store
        self.bounds = bounds
        self.max_bytes = max_bytes
        self._unpacking = DigestLocks()

    @contextlib.asynccontextmanager
    async def use(self, digest: str, name: str) -> AsyncIterator[Path]:
        """The unpacked task folder, kept from pruning until the block ends."""
        folder = self.root / digest.replace(":", "_")
        held = await asyncio.to_thread(_hold, folder)
        try:
            target = folder / _safe(name)
            if not target.exists():
                async with self._unpacking.held(digest):
                    if not target.exists():
                        result = await self.store.get(digest)
                        data = result.data or b""
                        await asyncio.to_thread(self._unpack, data, folder, target, name)
                        await asyncio.to_thread(self.prune)
            yield target
        finally:
            os.close(held)

    def _unpack(self, data: bytes, folder: Path, target: Path, name: str) -> None:
        staging = Path(tempfile.mkdtemp(dir=folder, prefix=".unpack-"))
        try:
            size = unpack_bounded(data, staging, self.bounds, name)
            (folder / f"{_SIZE}{target.name}").write_text(str(size))
            # Rename is atomic: a concurrent reader sees either no task folder or a complete one.
            staging.rename(target)
        except OSError:
            discard(staging)
            # Another executor on this host unpacked the same digest first (ENOTEMPTY/EEXIST): theirs is
            # identical content, so use it; anything else is a real failure.
            if not target.is_dir():
                raise
        except BaseException:
            discard(staging)
            raise

    def prune(self) -> None:
        """Delete least recently used digests nobody holds until the cache is within `max_bytes`."""
        entries = []
        for folder in self.root.iterdir() if self.root.is_dir() else ():
            if not folder.is_dir() or folder.name.startswith("."):
                continue
            size = sum(_size_of(f) for f in folder.glob(f"{_SIZE}*"))
            try:
                used = (folder / _LOCK).stat().st_mtime
            except FileNotFoundError:
                used = 0.0
            entries.append((used, size, folder))
        total = sum(size for _, size, _ in entries)
        for _used, size, folder in sorted(entries):
            if total <= self.max_bytes:
                return
            if _delete_unless_held(self.root, folder):
                total -= size


def _hold(folder: Path) -> int:
    """A shared lock on the digest's lock file (created if need be), on the file the path still names:
    a pruner may have deleted the folder between open and lock."""
    while True:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / _LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_SH)
        try:
            if os.stat(folder / _LOCK).st_ino == os.fstat(fd).st_ino:
                now = time.time()
                os.utime(fd, (now, now))  # last use, for the pruner's order
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


def _delete_unless_held(root: Path, folder: Path) -> bool:
    try:
        fd = os.open(folder / _LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # in use here or by another executor
        # Moved aside first, under the lock: no reader sees half a folder, and a new user creates a
        # fresh one (its lock file is a new inode, so _hold never keeps the moved one).
        trash = Path(tempfile.mkdtemp(dir=root, prefix=".trash-"))
        try:
            folder.rename(trash / "t")
        except OSError:
            discard(trash)
            return False
    except OSError:
        return False
    finally:
        os.close(fd)
    discard(trash)
    return True


def _size_of(path: Path) -> int:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return 0


def _safe(name: str) -> str:
    return name.replace("/", "__") or "task"


__all__ = ["TaskArchiveRefused", "TaskCache"]
