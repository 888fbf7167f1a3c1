"""Pack a local task folder (or a folder of tasks) into the tar.gz `POST /benchmarks/uploads` takes.

Refused here, before anything is sent, naming the file: a link that leaves the folder (it would send a
file of this machine), a link to a folder, anything but files, folders and links (devices, sockets),
and a folder past the task bounds (the server's defaults, REGATTA_MAX_TASK_MB and _FILES; the server
checks its own again). A link inside the folder is stored as the file it names, as a sync does. Hidden
entries (`.git`, `.venv`, `.DS_Store`) are left out: they are no part of a Harbor task.
"""

from __future__ import annotations

import gzip
import os
import stat
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from regatta_shared.task_uploads import TASK_MARKERS

MIB = 1024 * 1024
SPOOL_BYTES = 8 * MIB


class PackRefused(Exception):
    """The folder cannot be sent; the message names the file and the problem."""


@dataclass(frozen=True)
class PackBounds:
    max_bytes: int = 512 * MIB
    max_files: int = 10_000


def pack_folder(folder: Path, bounds: PackBounds | None = None) -> BinaryIO:
    """The folder as a tar.gz (entries under the folder's name), in a spooled temporary file at its
    start; the caller closes it."""
    bounds = bounds or PackBounds()
    if not folder.is_dir():
        raise PackRefused(f"{folder} is not a folder")
    root = folder.resolve()
    if not _is_task(root) and not any(child.is_dir() and _is_task(child) for child in root.iterdir()):
        raise PackRefused(f"{folder} holds no task (no task.toml, instruction.md, tests/ … in it or below)")
    files = _files(root, bounds)
    buffer = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115 - returned open
    try:
        with (
            gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as compressed,
            tarfile.open(fileobj=compressed, mode="w", format=tarfile.PAX_FORMAT) as archive,
        ):
            for real, name, is_dir in files:
                member = tarfile.TarInfo(f"{root.name}/{name}")
                if is_dir:
                    member.type = tarfile.DIRTYPE
                    member.mode = 0o755
                    archive.addfile(member)
                    continue
                with real.open("rb") as handle:
                    info = os.fstat(handle.fileno())
                    member.size = info.st_size
                    member.mode = info.st_mode & 0o755
                    archive.addfile(member, handle)
    except BaseException:
        buffer.close()
        raise
    buffer.seek(0)
    return buffer  # type: ignore[return-value]


def _is_task(folder: Path) -> bool:
    return any((folder / marker).exists() for marker in TASK_MARKERS)


def _files(root: Path, bounds: PackBounds) -> list[tuple[Path, str, bool]]:
    """(file to read, name in the archive, is a folder) of everything sent, checked and bounded."""
    found: list[tuple[Path, str, bool]] = []
    total = 0
    for current, dirs, names in os.walk(root):
        here = Path(current)
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in [*dirs, *sorted(n for n in names if not n.startswith("."))]:
            path = here / name
            shown = path.relative_to(root).as_posix()
            if len(found) >= bounds.max_files:
                raise PackRefused(f"{root.name}: more than {bounds.max_files} files and folders")
            info = path.lstat()
            real = path
            if stat.S_ISLNK(info.st_mode):
                real = path.resolve()
                if not real.is_relative_to(root):
                    raise PackRefused(f"{shown} links outside the folder (to {real})")
                if real.is_dir():
                    raise PackRefused(f"{shown} is a link to a folder; put the folder itself there")
                if not real.is_file():
                    raise PackRefused(f"{shown} is a link to nothing that can be sent")
                info = real.stat()
            if stat.S_ISDIR(info.st_mode):
                found.append((real, shown, True))
                continue
            if not stat.S_ISREG(info.st_mode):
                raise PackRefused(f"{shown} is not a file, a folder or a link (a device, socket or pipe)")
            total += info.st_size
            if total > bounds.max_bytes:
                raise PackRefused(f"{root.name}: its files pass {bounds.max_bytes // MIB} MiB at {shown}")
            found.append((real, shown, False))
    return found
