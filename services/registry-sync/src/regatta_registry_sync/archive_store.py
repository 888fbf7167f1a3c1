"""Task archives in the object store, keyed by content digest: written once, read by executors forever.

An archive is never replaced or deleted, so a run that locked a digest keeps fetching exactly the content
it locked, whatever later syncs record.
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO, Protocol

from nats.js.errors import NotFoundError
from nats.js.object_store import ObjectStore


class ArchiveStore(Protocol):
    async def exists(self, digest: str) -> bool: ...

    async def put(self, digest: str, data: BinaryIO) -> None: ...

    async def fetch(self, key: str, target: Path) -> bool: ...


class NatsArchiveStore:
    def __init__(self, bucket: ObjectStore) -> None:
        self.bucket = bucket

    async def exists(self, digest: str) -> bool:
        try:
            await self.bucket.get_info(digest)
        except NotFoundError:
            return False
        return True

    async def put(self, digest: str, data: BinaryIO) -> None:
        await self.bucket.put(digest, data)  # type: ignore[arg-type]

    async def fetch(self, key: str, target: Path) -> bool:
        """Write the object `key` (an upload: regatta_shared.task_uploads) to `target`; False if absent."""
        try:
            with target.open("wb") as out:
                await self.bucket.get(key, writeinto=out)  # type: ignore[arg-type]
        except NotFoundError:
            return False
        return True
