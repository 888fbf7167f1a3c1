"""Task files arrive from the NATS object store by content digest and are unpacked once per host."""

from __future__ import annotations

import asyncio
import io
import shutil
import tarfile
import tempfile
from pathlib import Path

from nats.js.object_store import ObjectStore


class TaskCache:
    def __init__(self, root: Path, store: ObjectStore) -> None:
        self.root = root
        self.store = store
        self._locks: dict[str, asyncio.Lock] = {}

    async def task_dir(self, digest: str, name: str) -> Path:
        folder = self.root / digest.replace(":", "_")
        target = folder / _safe(name)
        if target.exists():
            return target
        lock = self._locks.setdefault(digest, asyncio.Lock())
        async with lock:
            if target.exists():
                return target
            result = await self.store.get(digest)
            data = result.data or b""
            await asyncio.to_thread(_unpack, data, folder, target)
        return target


def _safe(name: str) -> str:
    return name.replace("/", "__") or "task"


def _unpack(data: bytes, folder: Path, target: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=folder, prefix=".unpack-"))
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
            archive.extractall(staging, filter="data")
        # Rename is atomic: a concurrent reader sees either no task folder or a complete one.
        staging.rename(target)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        # Another executor on this host unpacked the same digest first (ENOTEMPTY/EEXIST): theirs is
        # identical content, so use it; anything else is a real failure.
        if not target.is_dir():
            raise
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
