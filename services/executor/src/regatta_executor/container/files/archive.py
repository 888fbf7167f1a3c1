"""Files into and out of a container through the engine's archive API (no host folder is mounted).

What comes out is written by the attempt, so it is capped in size, extracted with tarfile's `data`
filter (no absolute paths, no `..`, no links out of the target, no device files) and never through
a symlink that was already in the target folder.
"""

from __future__ import annotations

import copy
import os
import posixpath
import stat
import tarfile
import tempfile
import time
from pathlib import Path, PurePosixPath

import docker

from regatta_executor.container.files.layer_usage import Written

SPOOL_BYTES = 8 * 1024 * 1024
MAX_LINE_BYTES = 4096


class DownloadTooLargeError(RuntimeError):
    pass


def container_path(path: str) -> str:
    normal = posixpath.normpath(posixpath.join("/", path))
    if "\0" in normal:
        raise ValueError(f"invalid container path {path!r}")
    return normal


def fetch_archive(
    api: docker.APIClient, container_id: str, source: str, max_bytes: int
) -> tuple[tempfile.SpooledTemporaryFile[bytes], int]:
    stream, _ = api.get_archive(container_id, container_path(source))
    buffer = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115 (returned open)
    size = 0
    for chunk in stream:
        size += len(chunk)
        if size > max_bytes:
            buffer.close()
            raise DownloadTooLargeError(
                f"{source} would take the attempt past the {max_bytes} bytes it may still bring back"
            )
        buffer.write(chunk)
    buffer.seek(0)
    return buffer, size


def read_folder(
    api: docker.APIClient, container_id: str, source: str, max_bytes: int
) -> tempfile.SpooledTemporaryFile[bytes] | None:
    """The engine's archive of the container's `source` folder (its members named `<folder name>/...`),
    None if it is larger than `max_bytes`."""
    try:
        return fetch_archive(api, container_id, source, max_bytes)[0]
    except DownloadTooLargeError:
        return None


def download_dir(api: docker.APIClient, container_id: str, source: str, target: Path, max_bytes: int) -> int:
    """Copy the contents of the container's `source` folder into `target` (created); returns the
    archive's size."""
    buffer, size = fetch_archive(api, container_id, source, max_bytes)
    target.mkdir(parents=True, exist_ok=True)
    with buffer, tarfile.open(fileobj=buffer, mode="r:") as archive:
        members = []
        for member in archive.getmembers():
            parts = PurePosixPath(member.name).parts
            if len(parts) < 2 or member.isdev():
                continue  # the folder itself, or a device/fifo with no content
            member.name = str(PurePosixPath(*parts[1:]))
            refuse_symlinked_parent(target, member.name)
            members.append(member)
        archive.extractall(target, members=members, filter=skip_unsafe)
    return size


def download_file(api: docker.APIClient, container_id: str, source: str, target: Path, max_bytes: int) -> int:
    buffer, size = fetch_archive(api, container_id, source, max_bytes)
    with buffer, tarfile.open(fileobj=buffer, mode="r:") as archive:
        member = archive.next()
        if member is None or not member.isfile():
            raise FileNotFoundError(f"{source} is not a regular file in the container")
        write_member(archive, member, target)
    return size


def skip_unsafe(member: tarfile.TarInfo, dest_path: str) -> tarfile.TarInfo | None:
    """tarfile's `data` filter, except that a member it refuses (a link out of the folder, an absolute
    path) is left out instead of ending the whole download: an agent can make such links easily."""
    try:
        return tarfile.data_filter(member, dest_path)
    except tarfile.FilterError:
        return None


def refuse_symlinked_parent(target: Path, name: str) -> None:
    current = target
    for part in PurePosixPath(name).parts[:-1]:
        current = current / part
        if current.is_symlink():
            raise ValueError(f"refusing to extract {name!r} through the symlink {current}")


Manifest = tuple[tuple[str, int, int, int, int, str], ...]


def manifest(root: Path) -> Manifest:
    """What a host folder holds, to tell whether it changed: every entry's path, type and mode, size,
    modification time (ns) and link target, without following links."""
    entries = []
    for folder, dirs, names in os.walk(root):
        dirs.sort()
        for name in sorted([*dirs, *names]):
            path = Path(folder, name)
            info = path.lstat()
            target = os.readlink(path) if stat.S_ISLNK(info.st_mode) else ""
            relative = str(path.relative_to(root))
            entries.append((relative, info.st_mode, info.st_size, info.st_mtime_ns, info.st_ino, target))
    return tuple(entries)


class StagedArchive:
    """Uploads waiting to go into the container together, as one archive extracted at its root.

    Names are relative to `/`, so no target folder has to exist first: the engine makes a missing
    parent (root-owned, 0755, as `mkdir -p` as root would). The source files are read when staged,
    never later (Harbor hands over temporary folders). A regular file still waiting here can be made
    executable in place, which is how `chmod +x` of a file just uploaded costs no exec."""

    def __init__(self) -> None:
        self._buffer = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115 (owned)
        self._archive = tarfile.open(fileobj=self._buffer, mode="w")  # noqa: SIM115 (owned)
        self._regular: dict[str, tuple[int, tarfile.TarInfo]] = {}
        self.targets: list[str] = []
        self.file_bytes = 0  # of every regular file staged (at least what extracting it writes)
        self.entries = 0  # of every member staged (at least the names extracting it makes)

    def __bool__(self) -> bool:
        return bool(self.targets)

    def add_dir(self, source: Path, target: str) -> None:
        """The contents of `source` into the folder `target`, like `docker cp dir/.`: only the
        contents are in the archive, as an entry for an existing folder would reset its owner and mode."""
        prefix = container_path(target).lstrip("/")
        self._begin(target)
        for child in sorted(source.iterdir()):
            self._archive.add(child, arcname=posixpath.join(prefix, child.name), filter=self._record)

    def add_file(self, source: Path, target: str) -> None:
        self._begin(target)
        self._archive.add(source, arcname=_relative(target), recursive=False, filter=self._record)

    def add_folders(self, folders: list[str], mode: int) -> None:
        """Folders with `mode`, owned by root (an existing one keeps its contents)."""
        for folder in folders:
            self._begin(folder)
            info = tarfile.TarInfo(_relative(folder))
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode, int(time.time())
            self._archive.addfile(self._record(info))

    def make_executable(self, path: str) -> bool:
        """`chmod +x path` (umask 022) on a regular file this archive will write last at `path`;
        false if it will not (the caller then runs the command)."""
        entry = self._regular.get(_relative(path))
        if entry is None:
            return False
        offset, info = entry
        before = info.tobuf(self._archive.format, self._archive.encoding, self._archive.errors)
        changed = copy.copy(info)
        changed.mode |= 0o111
        after = changed.tobuf(self._archive.format, self._archive.encoding, self._archive.errors)
        if len(after) != len(before):
            return False
        end = self._buffer.tell()
        self._buffer.seek(offset)
        self._buffer.write(after)
        self._buffer.seek(end)
        self._regular[changed.name] = (offset, changed)
        return True

    @property
    def written(self) -> Written:
        """What extracting the archive writes into the container's layer, at most."""
        return Written(self.file_bytes, self.entries)

    def take(self) -> tempfile.SpooledTemporaryFile[bytes]:
        """The finished archive, rewound (the caller closes it); this object is then spent."""
        self._archive.close()
        self._buffer.seek(0)
        return self._buffer

    def discard(self) -> None:
        self._archive.close()
        self._buffer.close()

    def _begin(self, target: str) -> None:
        self.targets.append(container_path(target))
        self._archive.inodes = {}  # a file staged by an earlier upload is copied again, not hard-linked

    def _record(self, info: tarfile.TarInfo) -> tarfile.TarInfo:
        # Called just before the member is written, at the archive's current end: its header's offset.
        name = info.name.rstrip("/")
        for staged in [n for n in self._regular if n == name or n.startswith(name + "/")]:
            del self._regular[staged]  # written over (a later member replaces, a folder or link hides it)
        if info.isreg():
            self._regular[name] = (self._archive.offset, copy.copy(info))
            self.file_bytes += info.size
        self.entries += 1
        return info


def _relative(path: str) -> str:
    relative = container_path(path).lstrip("/")
    if not relative:
        raise ValueError("cannot upload over the container's root folder")
    return relative


def write_member(archive: tarfile.TarFile, member: tarfile.TarInfo, target: Path) -> None:
    content = archive.extractfile(member)
    assert content is not None
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_symlink():
        target.unlink()
    with open(target, "wb") as out:
        while block := content.read(1024 * 1024):
            out.write(block)
