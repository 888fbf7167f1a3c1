"""The platform's own programs inside every attempt's container: a static busybox, read-only at /.regatta.

Threat: the agent usually runs as the container's root. What the platform keeps running across the kill
before the verifier (pid 1, container/exec/pid1.py) and what it runs to end the agent's processes (execs.py)
must not be open to it: a process it could ptrace, or whose /proc/<pid>/mem it could write, would carry
its code past the kill and could rewrite the reward; a program it could replace (the image's /bin/sh)
would run its code as the platform's.

Guarantee: a host folder (`tools_dir`, default `<state_dir>/tools`) owned by host root, mode 0711, holds
a static busybox as `busybox`, `sh` and `sleep` (one inode, mode 0111). It is bind-mounted read-only at
/.regatta into every container. With userns-remap (or rootless) host root is unmapped in the container,
so the container's root has no CAP_DAC_OVERRIDE over those inodes: it can execute them but neither read,
change nor replace them (the mount is read-only). The kernel marks a process that executes a file it may
not read as not dumpable, and ptrace or /proc/<pid>/mem of a non-dumpable process needs CAP_SYS_PTRACE,
which Docker's default capability set lacks. Debian's busybox runs its own applets before any program on
PATH, so a script run by /.regatta/sh uses none of the image's programs. Static, it runs in any image.
An engine running containers as host root (`allow_host_root`) gives none of this: trusted tasks only.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import stat
import struct
import threading
from pathlib import Path

from docker.types import Mount

MOUNT_POINT = "/.regatta"
BUSYBOX = f"{MOUNT_POINT}/busybox"
SHELL = f"{MOUNT_POINT}/sh"
SLEEP = f"{MOUNT_POINT}/sleep"
# Debian package busybox-static (scripts/setup.sh installs it).
SOURCE = Path("/bin/busybox")
NAMES = ("busybox", "sh", "sleep")
FOLDER_MODE = 0o711
FILE_MODE = 0o111
_MAX_BYTES = 16 * 1024 * 1024
_PT_INTERP = 3
_lock = threading.Lock()
_ready: set[tuple[Path, Path]] = set()


class ToolsError(RuntimeError):
    """The platform's tools folder cannot be made, or is not as the guarantee needs it."""


def platform_shell(script: str, *args: str) -> list[str]:
    """The argv that runs the POSIX shell `script` with the platform's sh (`args` as $1, $2, ...): for
    commands the agent must not be able to subvert through the image's programs."""
    return [SHELL, "-c", script, "regatta", *args]


def mount(folder: Path) -> Mount:
    return Mount(MOUNT_POINT, str(folder), type="bind", read_only=True)


def prepared(folder: Path, source: Path = SOURCE) -> Path:
    """`folder`, made (or repaired) and verified once per process; raises ToolsError."""
    key = (folder, source)
    with _lock:
        if key in _ready:
            return folder
        content = _static_program(source)
        digest = hashlib.sha256(content).hexdigest()
        if os.geteuid() != 0:
            # Files an unprivileged executor writes may be its engine's container root's (rootless):
            # only host root's are out of the container's reach everywhere.
            _verify(folder, len(content), None)
        else:
            try:
                _verify(folder, len(content), digest)
            except ToolsError:
                _write(folder, content)
                _verify(folder, len(content), digest)
        _ready.add(key)
    return folder


def _static_program(source: Path) -> bytes:
    try:
        content = source.read_bytes()
    except OSError as exc:
        raise ToolsError(f"{source}: {exc.strerror} (install the Debian package busybox-static)") from None
    if not 0 < len(content) <= _MAX_BYTES or content[:4] != b"\x7fELF":
        raise ToolsError(f"{source} is not an executable program")
    if _has_interpreter(content):
        raise ToolsError(f"{source} is dynamically linked: install busybox-static, it must run in any image")
    return content


def _has_interpreter(elf: bytes) -> bool:
    """Whether an ELF program names a dynamic loader (PT_INTERP), i.e. needs the image's libraries."""
    bits, order = elf[4], "<" if elf[5] == 1 else ">"
    if bits == 2:
        phoff, phentsize, phnum = struct.unpack_from(order + "Q14xHH", elf, 0x20)
    else:
        phoff, phentsize, phnum = struct.unpack_from(order + "I10xHH", elf, 0x1C)
    for index in range(phnum):
        (kind,) = struct.unpack_from(order + "I", elf, phoff + index * phentsize)
        if kind == _PT_INTERP:
            return True
    return False


def _write(folder: Path, content: bytes) -> None:
    """Make `folder` host root's, 0711, and put the program under each name: written to a temporary
    name, then renamed, so a container started meanwhile sees either the old file or the whole new one
    (and another executor doing the same at the same time, the same bytes)."""
    folder.mkdir(parents=True, exist_ok=True)
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode):
        raise ToolsError(f"{folder} is not a folder")
    os.chown(folder, 0, 0, follow_symlinks=False)
    os.chmod(folder, FOLDER_MODE, follow_symlinks=False)
    token = secrets.token_hex(6)
    staged = folder / f".staged-{token}"
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb", closefd=False) as out:
            out.write(content)
        os.fchown(fd, 0, 0)
        os.fchmod(fd, FILE_MODE)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        for name in NAMES:
            link = folder / f".{name}-{token}"
            os.link(staged, link)
            os.replace(link, folder / name)
    finally:
        staged.unlink(missing_ok=True)


def _verify(folder: Path, size: int, digest: str | None) -> None:
    """Raise ToolsError unless `folder` and each name in it are as the guarantee needs them."""
    try:
        info = os.lstat(folder)
    except FileNotFoundError:
        raise ToolsError(f"{folder} does not exist (root must make it: an executor as root does)") from None
    except OSError as exc:
        raise ToolsError(f"{folder}: {exc.strerror}") from None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0 or stat.S_IMODE(info.st_mode) != FOLDER_MODE:
        raise ToolsError(f"{folder} must be a folder of host root's with mode {FOLDER_MODE:o}")
    for name in NAMES:
        path = folder / name
        try:
            entry = os.lstat(path)
        except FileNotFoundError:
            raise ToolsError(f"{path} is missing") from None
        if (
            not stat.S_ISREG(entry.st_mode)
            or entry.st_uid != 0
            or stat.S_IMODE(entry.st_mode) != FILE_MODE
            or entry.st_size != size
        ):
            raise ToolsError(f"{path} must be host root's busybox with mode {FILE_MODE:o}")
        if digest is not None and hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            raise ToolsError(f"{path} is not the busybox of {SOURCE}")
