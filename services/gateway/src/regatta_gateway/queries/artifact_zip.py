"""A run's artifacts as one zip, streamed: `GET /api/v1/runs/{key}/artifacts.zip`.

The entries are the download manifest's artifact files (queries/downloads.py: artifacts/<task>/
agent-<a>-attempt-<n>/<path>, whose segments never are empty, `.` or `..`), pinned to the run's version
when asked, so the zip holds exactly what the manifest lists. Names come from the sandbox, so each is
made safe again for an unzipping tool (no control characters, no backslash, no absolute or parent path).
The whole is bounded before a byte is sent (MAX_ZIP_FILES, MAX_ZIP_BYTES of content): a larger run is
refused with 413 and downloaded file by file instead. One file at a time is held in memory.
"""

from __future__ import annotations

import asyncio
import re
import time
import zipfile
from collections.abc import AsyncIterator
from typing import Any

from regatta_shared.eventstore import EventStore
from regatta_shared.ids import run_stream

from regatta_gateway.errors import TooLarge
from regatta_gateway.principals import Scope
from regatta_gateway.queries.downloads import OutputFile, downloadable_run, files_of
from regatta_gateway.queries.grading import Fetch
from regatta_gateway.queries.run_snapshot import load_snapshot

MAX_ZIP_FILES = 50_000
MAX_ZIP_BYTES = 1024 * 1024 * 1024
MISSING_NAME = "MISSING.txt"
_UNSAFE = re.compile(r"[\x00-\x1f\x7f\\:]")


def zip_name(path: str) -> str:
    """`path` as a zip entry an unzipping tool writes where it should: relative, '/'-separated, no control
    characters, backslashes or drive colons, no empty, `.` or `..` segment."""
    parts = [_UNSAFE.sub("_", part).strip() for part in path.split("/")]
    return "/".join(part if part not in ("", ".", "..") else "_" for part in parts)


def zip_plan(store: EventStore, scope: Scope, key: str) -> tuple[dict[str, Any], list[OutputFile]]:
    """The run (in the caller's workspace, else 404) and the artifact files its zip will hold; 413 past
    the bounds."""
    run = downloadable_run(store, scope, key)
    version = store.stream_version(run_stream(run["id"]))
    files = files_of(load_snapshot(store, run["id"], version), ["artifacts"])
    total = sum(f.size for f in files)
    if len(files) > MAX_ZIP_FILES or total > MAX_ZIP_BYTES:
        raise TooLarge(
            f"The run's artifacts ({len(files):,} files, {total:,} bytes) exceed what one zip holds "
            f"({MAX_ZIP_FILES:,} files, {MAX_ZIP_BYTES:,} bytes): download them file by file "
            "(GET /api/v1/runs/{key}/downloads?types=artifacts, or `regatta run download`)",
            code="PAYLOAD_TOO_LARGE",
            max_bytes=MAX_ZIP_BYTES,
            max_files=MAX_ZIP_FILES,
        )
    return run, files


class _Sink:
    """A write-only, unseekable file for ZipFile (which then writes data descriptors): what was written
    since the last `take` is the next chunk of the response."""

    def __init__(self) -> None:
        self._chunks: list[bytes] = []

    def write(self, data: bytes) -> int:
        self._chunks.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass

    def take(self) -> bytes:
        out = b"".join(self._chunks)
        self._chunks.clear()
        return out


async def stream_zip(files: list[OutputFile], fetch: Fetch) -> AsyncIterator[bytes]:
    """The zip's bytes, file by file. A file no longer stored (or not of its recorded size) is left out
    and named in MISSING.txt: the response has begun by then, so it cannot become an error."""
    sink = _Sink()
    archive = zipfile.ZipFile(sink, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1)
    stamp = time.localtime()[:6]
    missing: list[str] = []
    names: set[str] = set()
    for output in files:
        data = await fetch(str(output.digest))
        if data is None or len(data) != output.size:
            missing.append(output.path)
            continue
        name = zip_name(output.path)
        while name in names:  # two paths made equal by the cleaning above
            name = f"{name}_"
        names.add(name)
        info = zipfile.ZipInfo(name, date_time=stamp)
        info.compress_type = zipfile.ZIP_DEFLATED
        # Deflating a large log takes a while: off the event loop.
        await asyncio.to_thread(archive.writestr, info, data)
        yield sink.take()
    if missing:
        note = "Not stored any more (or not of their recorded size):\n" + "\n".join(missing) + "\n"
        archive.writestr(zipfile.ZipInfo(MISSING_NAME, date_time=stamp), note)
    archive.close()
    yield sink.take()
