"""Uploads an attempt's logs, trajectory, verifier output and collected artifacts by content digest.

A multi-step task's are each step's, which Harbor moves to steps/<name>/{agent,verifier,artifacts}/; they
are kept as the rest (same bounds, same redaction), under those paths.

The trial's agent/, verifier/ and artifacts/ folders were bind-mounted into the sandbox, so the agent
may have planted symlinks (or FIFOs, or symlinked folders) there pointing at host files. Files are
therefore read by walking from the trial folder one directory fd at a time with O_NOFOLLOW, and only
regular files are read: nothing outside the trial folder is ever opened.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from nats.js.errors import NotFoundError
from nats.js.object_store import ObjectStore
from regatta_shared.events import ArtifactRef

from ..digest_locks import DigestLocks
from .redaction import Redactor, strip_recorded_env

COLLECTED = ("agent", "verifier", "artifacts", "steps")
TOP_LEVEL = ("result.json", "trial.log", "exception.txt", "environment-build.log")
MAX_FILE_BYTES = 20 * 1024 * 1024
_UPLOAD_WINDOW = 8
MAX_FILES = 200
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def collect(trial_dir: Path) -> Iterator[tuple[str, bytes]]:
    """(path relative to the trial folder, content) of each regular file worth keeping, one at a time
    (at most MAX_FILES of them), so that only one file is held in memory. The trial's own few files
    come first: however many the agent's folders hold, the result and the full error are kept."""
    try:
        root = os.open(trial_dir, _DIR_FLAGS)
    except OSError:
        return
    try:
        found = itertools.chain(
            ((name, data) for name in TOP_LEVEL if (data := _read_regular(root, name)) is not None),
            *(_walk(root, folder, folder) for folder in COLLECTED),
        )
        yield from itertools.islice(found, MAX_FILES)
    finally:
        os.close(root)


def _walk(parent_fd: int, name: str, relative: str) -> Iterator[tuple[str, bytes]]:
    try:
        dir_fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except OSError:
        return  # missing, or a symlink / non-directory planted in place of a folder
    try:
        with os.scandir(dir_fd) as entries:
            names = sorted((entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries)
        for child, is_dir in names:
            path = f"{relative}/{child}"
            if is_dir:
                yield from _walk(dir_fd, child, path)
            elif (data := _read_regular(dir_fd, child)) is not None:
                yield path, data
    finally:
        os.close(dir_fd)


def _read_regular(dir_fd: int, name: str) -> bytes | None:
    """The content of a regular file of at most MAX_FILE_BYTES; None for anything else (a symlink
    fails O_NOFOLLOW, a FIFO or device fails the S_ISREG check without blocking)."""
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_FILE_BYTES:
            return None
        os.set_blocking(fd, True)
        chunks, size = [], 0
        while chunk := os.read(fd, 1 << 20):
            size += len(chunk)
            if size > MAX_FILE_BYTES:
                return None
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def redact_bytes(data: bytes, redact: list[str] | None, path: str = "") -> bytes:
    """A file as it may be stored: Harbor's recorded env stripped, then every encoding of every secret
    value replaced (regatta_executor.attempt.redaction)."""
    return _redact(data, Redactor(redact or []), path)


def _redact(data: bytes, redactor: Redactor, path: str) -> bytes:
    if path == "result.json":
        data = strip_recorded_env(data)
    return redactor.bytes(data)


async def upload(store: ObjectStore, trial_dir: Path, redact: list[str] | None = None) -> list[ArtifactRef]:
    """Files go up a few at a time: each costs several JetStream round trips, which in sequence were a
    large share of a short attempt, while a bounded window keeps memory at a few files' worth."""
    refs: list[ArtifactRef] = []
    redactor = Redactor(redact or [])
    files = collect(trial_dir)
    while window := list(itertools.islice(files, _UPLOAD_WINDOW)):
        contents: dict[str, bytes] = {}
        for relative, raw in window:
            data = _redact(raw, redactor, relative)
            digest = "sha256:" + hashlib.sha256(data).hexdigest()
            contents[digest] = data  # equal files (empty logs, typically) are stored once
            refs.append(ArtifactRef(path=relative, digest=digest, size=len(data)))
        await asyncio.gather(*(_store(store, digest, data) for digest, data in contents.items()))
    return refs


class _KnownDigests:
    """Digests this process saw stored. Objects are named by their content and the bucket never deletes
    one, so a digest stored once needs no existence check (a JetStream round trip) again: most files of
    short attempts (empty logs, a reward of 1) are the same every time."""

    def __init__(self, kept: int = 50_000) -> None:
        self._kept = kept
        self._digests: dict[str, None] = {}

    def __contains__(self, digest: str) -> bool:
        return digest in self._digests

    def add(self, digest: str) -> None:
        self._digests[digest] = None
        if len(self._digests) > self._kept:
            del self._digests[next(iter(self._digests))]


_KNOWN = _KnownDigests()


# Two attempts finishing together in this process often carry equal files (empty logs), and nats-py's put
# of a name stored since its check purges the chunks it replaces, which the executor's NATS user may not
# do (a compromised executor could empty the bucket): the purge is refused and the put fails after its
# timeout. So one upload per digest at a time; the next finds it stored.
_UPLOADS = DigestLocks()


async def _store(store: ObjectStore, digest: str, data: bytes) -> None:
    if digest in _KNOWN:
        return
    async with _UPLOADS.held(digest):
        if digest in _KNOWN:
            return
        await _store_once(store, digest, data)
        _KNOWN.add(digest)


async def _store_once(store: ObjectStore, digest: str, data: bytes) -> None:
    try:
        await store.get_info(digest)
        return
    except NotFoundError:
        pass
    try:
        await store.put(digest, data)
    except Exception:
        # Another executor stored it between the check and the put, so the put's purge of the chunks
        # it replaced was refused; the name is the content's digest, so what is there is this data.
        try:
            info = await store.get_info(digest)
        except NotFoundError:
            info = None
        if info is None or info.size != len(data):
            raise
