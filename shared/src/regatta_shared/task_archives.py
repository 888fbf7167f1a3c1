"""Reading one task archive, bounded while it streams: entries, bytes and expansion ratio.

Used by the executor on the archives of the object store, where registry-sync put them after bounding
the task's files (the second line: an archive written by anything else, or by a sync with higher
bounds), and by registry-sync on the archives Harbor's task client downloads from the hub. Nothing
is trusted from a header: entries are counted as they come and each file's bytes as they are read. The
archive is walked twice: first to a null sink, so a bomb (a 1 GiB file of zeros, a few hundred KB
compressed; 100,000 empty files) is refused, naming the file or the count, before anything is written;
then into the staging folder, counted again. Registry-sync stores links as the files they name, so an
archive with a link, a device or anything but files and folders is refused, as is any name Python's
`data` filter refuses (absolute, `..`, outside the folder).
"""

from __future__ import annotations

import gzip
import io
import os
import shutil
import tarfile
import zlib
from pathlib import Path
from typing import BinaryIO

from .ceilings import TaskFileBounds

_MIB = 1024 * 1024
_CHUNK = 1024 * 1024


class TaskArchiveRefused(Exception):
    """The archive passes a bound or holds what no task archive holds; the message names it, and
    `entry` the archive entry at fault when one is."""

    def __init__(self, message: str, entry: str | None = None) -> None:
        super().__init__(message)
        self.entry = entry


def unpack_bounded(data: bytes, staging: Path, bounds: TaskFileBounds, label: str) -> int:
    """Unpack the tar.gz `data` into the (empty) folder `staging`; returns the bytes written. On a
    refusal the caller removes `staging`."""
    _walk(io.BytesIO(data), len(data), None, bounds, label)
    return _walk(io.BytesIO(data), len(data), staging, bounds, label)


def unpack_file(path: Path, staging: Path, bounds: TaskFileBounds, label: str) -> int:
    """`unpack_bounded` for an archive on disk (an upload may be larger than is worth holding in memory)."""
    check_archive_file(path, bounds, label)
    with path.open("rb") as handle:
        return _walk(handle, path.stat().st_size, staging, bounds, label)


def check_archive_file(path: Path, bounds: TaskFileBounds, label: str) -> None:
    """Walk the tar.gz at `path` under the bounds without writing anything; TaskArchiveRefused if not."""
    size = path.stat().st_size
    if size > bounds.max_bytes:
        raise TaskArchiveRefused(
            f"task {label!r}: its archive passes {bounds.max_bytes // _MIB} MiB (REGATTA_MAX_TASK_MB)"
        )
    with path.open("rb") as handle:
        _walk(handle, size, None, bounds, label)


def _walk(
    source_file: BinaryIO, compressed: int, staging: Path | None, bounds: TaskFileBounds, label: str
) -> int:
    written = 0
    entries = 0
    root = str(staging or Path("/nonexistent-task-root"))
    try:
        with tarfile.open(fileobj=source_file, mode="r|gz") as archive:
            for member in archive:
                entries += 1
                if entries > bounds.max_files:
                    raise TaskArchiveRefused(
                        f"task {label!r}: its archive has more than {bounds.max_files} entries "
                        "(REGATTA_MAX_TASK_FILES)"
                    )
                if member.name.startswith("/"):
                    # The data filter would only strip the slash: no archive we write has one.
                    raise TaskArchiveRefused(
                        f"task {label!r}: archive entry {member.name!r} is an absolute path", member.name
                    )
                try:
                    member = tarfile.data_filter(member, root)
                except tarfile.FilterError as error:
                    raise TaskArchiveRefused(
                        f"task {label!r}: archive entry refused ({error})", member.name
                    ) from None
                target = Path(root) / member.name
                if member.isdir():
                    if staging is not None:
                        target.mkdir(parents=True, exist_ok=True)
                    continue
                if not member.isfile():
                    raise TaskArchiveRefused(
                        f"task {label!r}: archive entry {member.name!r} is not a file or a folder"
                        + (f" (a link to {member.linkname!r})" if member.issym() or member.islnk() else ""),
                        member.name,
                    )
                source = archive.extractfile(member)
                if source is None:
                    raise TaskArchiveRefused(
                        f"task {label!r}: archive entry {member.name!r} has no data", member.name
                    )
                out = None
                if staging is not None:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    out = open(target, "xb")  # noqa: SIM115 - closed below
                try:
                    while chunk := source.read(_CHUNK):
                        written += len(chunk)
                        _check(written, compressed, bounds, label, member.name)
                        if out is not None:
                            out.write(chunk)
                finally:
                    if out is not None:
                        out.close()
                if staging is not None:
                    os.chmod(target, (member.mode or 0o644) & 0o755)
    except FileExistsError as error:
        raise TaskArchiveRefused(f"task {label!r}: archive names {error.filename} twice") from None
    except (tarfile.TarError, EOFError, gzip.BadGzipFile, zlib.error) as error:
        # Not an OSError in general: a full disk is this host's fault, retried, not the archive's.
        raise TaskArchiveRefused(f"task {label!r}: its archive cannot be unpacked ({error})") from None
    return written


def _check(written: int, compressed: int, bounds: TaskFileBounds, label: str, name: str) -> None:
    if written > bounds.max_bytes:
        raise TaskArchiveRefused(
            f"task {label!r}: unpacking passes {bounds.max_bytes // _MIB} MiB at {name} "
            "(REGATTA_MAX_TASK_MB)",
            name,
        )
    if bounds.over_expansion(written, compressed):
        raise TaskArchiveRefused(
            f"task {label!r}: its archive of {compressed} bytes expands more than "
            f"{bounds.max_expansion:g} times at {name} (REGATTA_MAX_TASK_EXPANSION)",
            name,
        )


def discard(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
