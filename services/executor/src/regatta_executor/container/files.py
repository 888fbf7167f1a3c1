"""Files into and out of a container through the engine's archive API (no host folder is mounted).

What comes out is written by the attempt, so it is capped in size, extracted with tarfile's `data`
filter (no absolute paths, no `..`, no links out of the target, no device files) and never through
a symlink that was already in the target folder.
"""

from __future__ import annotations

import posixpath
import tarfile
import tempfile
from pathlib import Path, PurePosixPath

import docker

_SPOOL_BYTES = 8 * 1024 * 1024


class DownloadTooLargeError(RuntimeError):
    pass


def container_path(path: str) -> str:
    normal = posixpath.normpath(posixpath.join("/", path))
    if "\0" in normal:
        raise ValueError(f"invalid container path {path!r}")
    return normal


def upload_file(api: docker.APIClient, container_id: str, source: Path, target: str) -> None:
    """Copy `source` to `target`, whose folder must exist (the engine answers NotFound otherwise)."""
    target_path = PurePosixPath(container_path(target))
    with tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES) as buffer:
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            archive.add(source, arcname=target_path.name, recursive=False)
        buffer.seek(0)
        api.put_archive(container_id, str(target_path.parent), buffer)


def upload_dir(api: docker.APIClient, container_id: str, source: Path, target: str) -> None:
    """Copy the contents of `source` into the existing folder `target`, like `docker cp dir/.`. Only
    the contents are in the archive: an entry for an existing folder would reset its owner and mode."""
    with tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES) as buffer:
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            for child in sorted(source.iterdir()):
                archive.add(child, arcname=child.name)
        buffer.seek(0)
        api.put_archive(container_id, container_path(target), buffer)


def _fetch(
    api: docker.APIClient, container_id: str, source: str, max_bytes: int
) -> tuple[tempfile.SpooledTemporaryFile[bytes], int]:
    stream, _ = api.get_archive(container_id, container_path(source))
    buffer = tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES)  # noqa: SIM115 (returned open)
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


def download_dir(api: docker.APIClient, container_id: str, source: str, target: Path, max_bytes: int) -> int:
    """Copy the contents of the container's `source` folder into `target` (created); returns the
    archive's size."""
    buffer, size = _fetch(api, container_id, source, max_bytes)
    target.mkdir(parents=True, exist_ok=True)
    with buffer, tarfile.open(fileobj=buffer, mode="r:") as archive:
        members = []
        for member in archive.getmembers():
            parts = PurePosixPath(member.name).parts
            if len(parts) < 2 or member.isdev():
                continue  # the folder itself, or a device/fifo with no content
            member.name = str(PurePosixPath(*parts[1:]))
            _refuse_symlinked_parent(target, member.name)
            members.append(member)
        archive.extractall(target, members=members, filter=_skip_unsafe)
    return size


def download_file(api: docker.APIClient, container_id: str, source: str, target: Path, max_bytes: int) -> int:
    buffer, size = _fetch(api, container_id, source, max_bytes)
    with buffer, tarfile.open(fileobj=buffer, mode="r:") as archive:
        member = archive.next()
        if member is None or not member.isfile():
            raise FileNotFoundError(f"{source} is not a regular file in the container")
        content = archive.extractfile(member)
        assert content is not None
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink():
            target.unlink()
        with open(target, "wb") as out:
            while block := content.read(1024 * 1024):
                out.write(block)
    return size


def _skip_unsafe(member: tarfile.TarInfo, dest_path: str) -> tarfile.TarInfo | None:
    """tarfile's `data` filter, except that a member it refuses (a link out of the folder, an absolute
    path) is left out instead of ending the whole download: an agent can make such links easily."""
    try:
        return tarfile.data_filter(member, dest_path)
    except tarfile.FilterError:
        return None


def _refuse_symlinked_parent(target: Path, name: str) -> None:
    current = target
    for part in PurePosixPath(name).parts[:-1]:
        current = current / part
        if current.is_symlink():
            raise ValueError(f"refusing to extract {name!r} through the symlink {current}")
