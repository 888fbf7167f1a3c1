"""One holder per content digest at a time in this executor: the task cache unpacking an archive and the
artifact upload storing a file both do work that a second copy of, started alongside, would waste or
break. A lock lives only while someone holds or awaits it, since digests come without end."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class DigestLocks:
    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def held(self, digest: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(digest, (asyncio.Lock(), 0))
        self._locks[digest] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[digest]
            if users == 1:
                del self._locks[digest]
            else:
                self._locks[digest] = (lock, users - 1)
