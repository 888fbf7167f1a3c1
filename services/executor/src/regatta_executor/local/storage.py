"""The storage cap of a sandbox: its writable root is a size-limited tmpfs mounted on the host.

Measured on the executor host (ext4 root, 2 cores, loaded): a tmpfs mount + unmount is a fraction of a
millisecond as two syscalls; a loop-mounted ext4 image costs ~130 ms for mkfs and ~65 ms each to mount
and unmount, on every trial; ext4/XFS project quotas need a filesystem mounted with `prjquota`, which the
executor cannot count on. tmpfs it is, with its trade-off: what the sandbox writes is held in memory and
charged to the sandbox's memory cgroup, so with a memory cgroup the effective cap is the smaller of the
memory and storage limits. The trial's log folders get tmpfs mounts of their own of the same size (one
for the agent's logs and artifacts, one for the verifier's), so that what a sandbox writes to the host's
disk through them is capped as a whole, not only file by file (sandbox.py copies them back at the end).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
from pathlib import Path

_MS_NOSUID = 0x2
_MS_NODEV = 0x4
_MNT_DETACH = 0x2
_MS_BIND = 0x1000
_BYTES_PER_INODE = 16 * 1024
_MIN_INODES = 65536


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def mount_tmpfs(target: Path, size_bytes: int, owner: int = 0) -> None:
    """Mount a tmpfs of `size_bytes` on `target` (an empty folder), its root owned by the host uid and
    gid `owner`. Raises OSError if not permitted."""
    inodes = max(_MIN_INODES, size_bytes // _BYTES_PER_INODE)
    options = f"size={size_bytes},nr_inodes={inodes},mode=0755,uid={owner},gid={owner}".encode()
    flags = _MS_NOSUID | _MS_NODEV
    if _libc().mount(b"tmpfs", os.fsencode(target), b"tmpfs", flags, options) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"cannot mount a tmpfs on {target}: {os.strerror(errno)}")


def bind_mount(source: Path, target: Path) -> None:
    """Bind the folder `source` over the folder `target`. Raises OSError if not permitted."""
    if _libc().mount(os.fsencode(source), os.fsencode(target), None, _MS_BIND, None) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"cannot bind {source} on {target}: {os.strerror(errno)}")


def unmount(target: Path) -> None:
    """Detach the mount on `target`; its memory is freed once no process uses it any more."""
    if _libc().umount2(os.fsencode(target), _MNT_DETACH) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"cannot unmount {target}: {os.strerror(errno)}")


def mount_points() -> set[Path]:
    """Every mount point in this process's mount namespace."""
    return {
        Path(line.split()[4].replace("\\040", " "))
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
    }


def mount_points_under(folder: Path) -> list[Path]:
    """Mount points at or below `folder` in this process's mount namespace, deepest first."""
    prefix = str(folder)
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mount_point = line.split()[4].replace("\\040", " ")
        if mount_point == prefix or mount_point.startswith(prefix + "/"):
            found.append(Path(mount_point))
    return sorted(found, key=lambda p: len(p.parts), reverse=True)
