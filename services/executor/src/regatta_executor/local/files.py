"""Host-side copies into and out of a sandbox, confined to its writable root and writable bind mounts.

Sandbox paths are resolved the way the kernel resolves them *inside* the sandbox (absolute symlinks
restart at the sandbox root), so a symlink planted by the agent cannot point a copy at a host file.
The copy then walks the resolved path one component at a time with O_NOFOLLOW, so a symlink swapped
in after resolution makes the copy fail instead of escaping.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

_MAX_SYMLINK_HOPS = 40
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

logger = logging.getLogger(__name__)


class SandboxPathError(PermissionError):
    """A path that resolves outside the sandbox's writable root."""


class SandboxFiles:
    def __init__(
        self,
        root: Path,
        writable_binds: Mapping[PurePosixPath, Path],
        foreign: list[PurePosixPath],
        owner: int | None = None,
    ) -> None:
        """`writable_binds` maps sandbox mount points to host folders; `foreign` lists sandbox paths
        backed by something else (read-only host folders, /proc, /dev) that copies must not touch;
        `owner` is the host uid (and gid) that what a copy creates belongs to: the sandbox's own,
        so that its processes can change what the executor put there."""
        self._root = root
        self._binds = dict(writable_binds)
        self._foreign = foreign
        self._owner = owner

    def upload_file(self, source: Path, target: str) -> None:
        resolved = self.resolve(target)
        if target.endswith("/") or self._is_dir(resolved):
            directory, name = resolved, source.name
        else:
            directory, name = resolved.parent, resolved.name
        dir_fd = self._open_dir(directory, create=True)
        try:
            _copy_file_in(source, name, dir_fd, self._owner)
        finally:
            os.close(dir_fd)

    def upload_dir(self, source: Path, target: str) -> None:
        dir_fd = self._open_dir(self.resolve(target), create=True)
        try:
            _copy_tree_in(source, dir_fd, self._owner)
        finally:
            os.close(dir_fd)

    def download_file(self, source: str, target: Path) -> None:
        resolved = self.resolve(source)
        if resolved == PurePosixPath("/"):
            raise IsADirectoryError(source)
        if target.is_dir():
            target = target / resolved.name
        dir_fd = self._open_dir(resolved.parent, create=False)
        try:
            fd = _open_regular(resolved.name, dir_fd)
        finally:
            os.close(dir_fd)
        target.parent.mkdir(parents=True, exist_ok=True)
        with os.fdopen(fd, "rb") as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst)

    def download_dir(self, source: str, target: Path) -> None:
        dir_fd = self._open_dir(self.resolve(source), create=False)
        try:
            target.mkdir(parents=True, exist_ok=True)
            _copy_tree_out(dir_fd, target)
        finally:
            os.close(dir_fd)

    def clear_dir(self, path: str) -> None:
        """Delete everything inside the folder `path` (not the folder itself), never following links."""
        try:
            dir_fd = self._open_dir(self.resolve(path), create=False)
        except FileNotFoundError:
            return
        try:
            with os.scandir(dir_fd) as entries:
                children = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries]
            for name, is_dir in children:
                if is_dir:
                    shutil.rmtree(name, dir_fd=dir_fd)
                else:
                    os.unlink(name, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)

    def make_dirs(self, path: str) -> None:
        os.close(self._open_dir(self.resolve(path), create=True))

    def resolve(self, path: str) -> PurePosixPath:
        """The sandbox path with every symlink expanded, as the sandbox itself would see it."""
        pending = list(PurePosixPath("/", path).parts[1:])
        resolved: list[str] = []
        hops = 0
        while pending:
            part = pending.pop(0)
            if part in ("", "."):
                continue
            if part == "..":
                if resolved:
                    resolved.pop()
                continue
            host = self._host_path(PurePosixPath("/", *resolved, part))
            try:
                is_link = stat.S_ISLNK(os.lstat(host).st_mode)
            except (FileNotFoundError, NotADirectoryError):
                is_link = False
            if not is_link:
                resolved.append(part)
                continue
            hops += 1
            if hops > _MAX_SYMLINK_HOPS:
                raise SandboxPathError(f"too many symlinks in {path!r}")
            link = PurePosixPath(os.readlink(host))
            if link.is_absolute():
                resolved = []
            pending = [*link.parts[1 if link.is_absolute() else 0 :], *pending]
        result = PurePosixPath("/", *resolved)
        self._host_path(result)
        return result

    def _base(self, path: PurePosixPath) -> tuple[Path, PurePosixPath]:
        for foreign in self._foreign:
            if path.is_relative_to(foreign):
                raise SandboxPathError(f"{str(path)!r} is outside the sandbox's writable root")
        mount = max(
            (m for m in self._binds if path.is_relative_to(m)), key=lambda m: len(m.parts), default=None
        )
        if mount is None:
            return self._root, path.relative_to("/")
        return self._binds[mount], path.relative_to(mount)

    def _host_path(self, path: PurePosixPath) -> Path:
        base, rest = self._base(path)
        return base.joinpath(*rest.parts)

    def _is_dir(self, path: PurePosixPath) -> bool:
        try:
            os.close(self._open_dir(path, create=False))
            return True
        except (FileNotFoundError, NotADirectoryError):
            return False

    def _open_dir(self, path: PurePosixPath, *, create: bool) -> int:
        base, rest = self._base(path)
        fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for part in rest.parts:
                if create:
                    _make_dir(part, fd, self._owner)
                next_fd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = next_fd
        except OSError:
            os.close(fd)
            raise
        return fd


def _make_dir(name: str, dir_fd: int, owner: int | None) -> None:
    try:
        os.mkdir(name, 0o755, dir_fd=dir_fd)
    except FileExistsError:
        return
    if owner is not None:
        os.chown(name, owner, owner, dir_fd=dir_fd, follow_symlinks=False)


def _copy_file_in(source: Path, name: str, dir_fd: int, owner: int | None) -> None:
    mode = stat.S_IMODE(os.stat(source).st_mode)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(name, flags, mode, dir_fd=dir_fd)
    with os.fdopen(fd, "wb") as dst, open(source, "rb") as src:
        shutil.copyfileobj(src, dst)
        if owner is not None:
            os.fchown(fd, owner, owner)
        os.fchmod(fd, mode)


def _copy_tree_in(source: Path, dir_fd: int, owner: int | None) -> None:
    for entry in os.scandir(source):
        if entry.is_symlink():
            _remove_entry(entry.name, dir_fd)
            os.symlink(os.readlink(entry.path), entry.name, dir_fd=dir_fd)
            if owner is not None:
                os.chown(entry.name, owner, owner, dir_fd=dir_fd, follow_symlinks=False)
        elif entry.is_dir():
            _make_dir(entry.name, dir_fd, owner)
            child = os.open(entry.name, _DIR_FLAGS, dir_fd=dir_fd)
            try:
                _copy_tree_in(Path(entry.path), child, owner)
            finally:
                os.close(child)
        elif entry.is_file():
            _copy_file_in(Path(entry.path), entry.name, dir_fd, owner)


def _remove_entry(name: str, dir_fd: int) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        os.rmdir(name, dir_fd=dir_fd)


def _open_regular(name: str, dir_fd: int) -> int:
    """O_NONBLOCK keeps a FIFO planted in place of a file from blocking the copy forever."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise IsADirectoryError(f"{name!r} is not a regular file")
    os.set_blocking(fd, True)
    return fd


def copy_tree_in(source: Path, dir_fd: int, owner: int | None) -> None:
    """Copy the host folder `source` into the folder open at `dir_fd`, what it creates owned by `owner`."""
    _copy_tree_in(source, dir_fd, owner)


def copy_tree_out(dir_fd: int, target: Path) -> None:
    """Copy the folder open at `dir_fd` to the host folder `target`: directories and regular files."""
    _copy_tree_out(dir_fd, target)


def _copy_tree_out(dir_fd: int, target: Path) -> None:
    """Only directories and regular files leave the sandbox: a symlink copied to the host would point
    at host files when Harbor or the executor later reads the trial folder."""
    with os.scandir(dir_fd) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                child = os.open(entry.name, _DIR_FLAGS, dir_fd=dir_fd)
                try:
                    (target / entry.name).mkdir(exist_ok=True)
                    _copy_tree_out(child, target / entry.name)
                finally:
                    os.close(child)
            elif entry.is_file(follow_symlinks=False):
                fd = _open_regular(entry.name, dir_fd)
                with os.fdopen(fd, "rb") as src, open(target / entry.name, "wb") as dst:
                    shutil.copyfileobj(src, dst)
            else:
                logger.debug("not copying %s out of the sandbox: not a regular file", entry.name)
