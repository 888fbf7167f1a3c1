"""Snapshots of a container folder: one archive, read once, from which several downloads and folder
checks are answered while nothing has run in the container since (ContainerEnvironment), and the streams
that take such an archive off an exec's own output (the exec that ends the agent's turn, Harbor's run of
the test script)."""

from __future__ import annotations

import copy
import posixpath
import shlex
import tarfile
import tempfile
from pathlib import Path, PurePosixPath

import docker

from regatta_executor.container.files.archive import (
    MAX_LINE_BYTES,
    SPOOL_BYTES,
    container_path,
    fetch_archive,
    refuse_symlinked_parent,
    skip_unsafe,
    write_member,
)


class Snapshot:
    """One archive of a container folder, read once, from which several downloads and folder checks
    are answered while nothing has run in the container since (see ContainerEnvironment)."""

    def __init__(self, root: str, buffer: tempfile.SpooledTemporaryFile[bytes]) -> None:
        self.root = container_path(root)
        self._buffer = buffer
        self._archive = tarfile.open(fileobj=buffer, mode="r:")  # noqa: SIM115 (owned)
        self._members = {member.name.rstrip("/"): member for member in self._archive.getmembers()}
        self._top = posixpath.basename(self.root) or "."
        self.stale: list[str] = []

    @property
    def usable(self) -> bool:
        """The folder itself was archived as a folder (a symlink is archived as the link alone)."""
        top = self._members.get(self._top)
        return top is not None and top.isdir()

    @property
    def ends_whole(self) -> bool:
        """The archive's end-of-archive block follows its last member (a cut stream ends without it,
        and tarfile takes the cut for the end)."""
        end = self._buffer.tell()
        try:
            self._buffer.seek(self._archive.offset)
            return self._buffer.read(tarfile.BLOCKSIZE) == bytes(tarfile.BLOCKSIZE)
        finally:
            self._buffer.seek(end)

    def covers(self, path: str) -> bool:
        path = container_path(path)
        if not (path == self.root or path.startswith(self.root.rstrip("/") + "/")):
            return False
        return not any(_within(path, stale) or _within(stale, path) for stale in self.stale)

    def member(self, path: str) -> tarfile.TarInfo | None:
        return self._members.get(self._name(path))

    def through_link(self, path: str) -> bool:
        """Whether a folder between the archived folder and `path` is a symlink (the engine would
        follow it; the archive does not)."""
        parts = PurePosixPath(self._name(path)).parts
        for depth in range(1, len(parts)):
            member = self._members.get(str(PurePosixPath(*parts[:depth])))
            if member is None or not member.isdir():
                return True
        return False

    def is_plain_tree(self, path: str) -> bool:
        """`path` is a real folder here, reached without symlinks, and holds none: an upload into it
        cannot write anywhere else."""
        member = self.member(path)
        if member is None or not member.isdir() or self.through_link(path):
            return False
        prefix = self._name(path) + "/"
        return not any(m.issym() or m.islnk() for n, m in self._members.items() if n.startswith(prefix))

    def extract_dir(self, path: str, target: Path) -> None:
        prefix = self._name(path) + "/"
        members = []
        for name, member in self._members.items():
            if not name.startswith(prefix) or member.isdev():
                continue
            member = copy.copy(member)
            member.name = name[len(prefix) :]
            refuse_symlinked_parent(target, member.name)
            members.append(member)
        target.mkdir(parents=True, exist_ok=True)
        self._archive.extractall(target, members=members, filter=skip_unsafe)

    def extract_file(self, path: str, target: Path) -> None:
        member = self.member(path)
        if member is None or not member.isfile():
            raise FileNotFoundError(f"{path} is not a regular file in the container")
        write_member(self._archive, member, target)

    def close(self) -> None:
        self._archive.close()
        self._buffer.close()

    def _name(self, path: str) -> str:
        rest = container_path(path)[len(self.root.rstrip("/")) :].strip("/")
        return posixpath.join(self._top, rest) if rest else self._top


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def fetch_snapshot(
    api: docker.APIClient, container_id: str, root: str, max_bytes: int
) -> tuple[Snapshot, int]:
    buffer, size = fetch_archive(api, container_id, root, max_bytes)
    return Snapshot(root, buffer), size


def archive_command(busybox: str, root: str) -> str:
    """The platform's tar of the folder `root` to standard output, its members named as the engine's
    archive of it names them (from the folder's own name: `verifier/...` for /logs/verifier)."""
    path = PurePosixPath(container_path(root))
    return f"{busybox} tar -C {shlex.quote(str(path.parent))} -cf - {shlex.quote(path.name)}"


class SnapshotStream:
    """The standard output of a command that prints one line of text and then writes a tar archive of
    `root` (the exec that ends the agent's turn: the digest's line, then /logs): the line kept apart,
    the archive spooled up to `max_bytes` (past it, the rest is dropped and no snapshot made)."""

    def __init__(self, root: str, max_bytes: int, *, line: bool) -> None:
        self.root = container_path(root)
        self._max_bytes = max_bytes
        self._line: bytearray | None = bytearray() if line else None
        self._line_done = not line
        self._buffer = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115 (owned)
        self.size = 0
        self.too_large = False

    def __call__(self, data: bytes) -> None:
        if not self._line_done:
            assert self._line is not None
            head, newline, data = data.partition(b"\n")
            self._line += head
            if newline:
                self._line += newline
                self._line_done = True
            elif len(self._line) > MAX_LINE_BYTES:
                self._line_done = True  # not the line it should be; what follows is no archive either
                self.too_large = True
        if not data or self.too_large:
            return
        self.size += len(data)
        if self.size > self._max_bytes:
            self.too_large = True
            return
        self._buffer.write(data)

    def discard(self) -> None:
        self._buffer.close()

    @property
    def line(self) -> str:
        return bytes(self._line or b"").decode("utf-8", "replace")

    def snapshot(self) -> Snapshot | None:
        """The archive, if it came whole and archived `root` as a folder (else None: read it the
        engine's way)."""
        if self.too_large or not self._line_done:
            self._buffer.close()
            return None
        self._buffer.seek(0)
        try:
            snapshot = Snapshot(self.root, self._buffer)
        except tarfile.TarError:
            self._buffer.close()
            return None
        if not (snapshot.usable and snapshot.ends_whole):
            snapshot.close()
            return None
        return snapshot


class MarkedSnapshotStream:
    """The standard output of a command followed by a marker line and a tar archive of `root` (Harbor's
    test run, then /logs/verifier read in the same exec): a stdout sink (execs.run_command) that hands
    back the command's own output and keeps the archive. The marker is drawn per exec; output that
    holds it early only loses the archive (the engine's read is made instead)."""

    def __init__(self, root: str, max_bytes: int, marker: str) -> None:
        self._marker = marker.encode() + b"\n"
        self._archive = SnapshotStream(root, max_bytes, line=False)
        self._held = bytearray()
        self._found = False

    def __call__(self, data: bytes) -> bytes:
        if self._found:
            self._archive(data)
            return b""
        pending = bytes(self._held) + data
        at = pending.find(self._marker)
        if at >= 0:
            self._found = True
            self._held = bytearray()
            self._archive(pending[at + len(self._marker) :])
            return pending[:at]
        # What may be the start of the marker is held back until the next piece.
        keep = min(len(pending), len(self._marker) - 1)
        self._held = bytearray(pending[len(pending) - keep :])
        return pending[: len(pending) - keep]

    def rest(self) -> bytes:
        """The command's output held back at the end (none once the marker came)."""
        held, self._held = bytes(self._held), bytearray()
        return held

    @property
    def size(self) -> int:
        return self._archive.size

    def snapshot(self) -> Snapshot | None:
        if not self._found:
            self._archive.discard()
            return None
        return self._archive.snapshot()
