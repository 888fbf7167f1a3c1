"""Removal of sandbox workspaces, including those a crashed or killed executor left behind.

A running sandbox holds an exclusive flock on `<workspace>/.lock`; the kernel drops it when its
executor dies, however it dies. A workspace whose lock can be taken is therefore stale.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import time
from pathlib import Path

from regatta_executor.local import storage
from regatta_executor.local.limits import CgroupLeaf

LOCK_FILE = ".lock"
ROOT_DIR = "root"
TESTS_DIR = "tests"
LOGS_DIR = "logs"
VERIFIER_LOGS_DIR = "verifier-logs"
TMPFS_DIRS = (ROOT_DIR, TESTS_DIR, LOGS_DIR, VERIFIER_LOGS_DIR)
"""Host folders of a workspace that may hold the sandbox's own tmpfs mounts (root, /tests, logs)."""
KEPT_MARKER = ".kept"
HOST_MOUNTS = "host-mounts"
"""Host folders (the trial's log folders) that a workspace's folders are bind-mounted on, one a line."""
_UNLOCKED_GRACE_SEC = 600.0

logger = logging.getLogger(__name__)
_swept: set[Path] = set()


def lock_workspace(workspace: Path) -> int:
    """Create the workspace and hold its lock; returns the fd to keep open for the sandbox's life."""
    workspace.mkdir(parents=True)
    workspace.chmod(0o711)
    fd = os.open(workspace / LOCK_FILE, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def record_host_mount(workspace: Path, host_folder: Path) -> None:
    with open(workspace / HOST_MOUNTS, "a") as listing:
        listing.write(f"{host_folder}\n")


def remove_workspace(workspace: Path) -> None:
    """Unmount the workspace's folders from the host folders they were bound on (left there if the
    executor died), and the sandbox's tmpfs mounts (the storage cap), then rmtree, unless something
    else is mounted inside: deleting through a bind mount would delete host files. Sandbox mounts
    live in the sandbox's own mount namespace, so that should never happen."""
    with contextlib.suppress(FileNotFoundError):
        mounted = storage.mount_points()
        for line in (workspace / HOST_MOUNTS).read_text().splitlines():
            if Path(line) in mounted:
                storage.unmount(Path(line))
    ours = {workspace / name for name in TMPFS_DIRS}
    for mount_point in storage.mount_points_under(workspace):
        if mount_point not in ours:
            raise RuntimeError(f"refusing to delete {workspace}: {mount_point} is mounted inside")
        storage.unmount(mount_point)
    shutil.rmtree(workspace, ignore_errors=True)


def swept(base: Path) -> bool:
    return base in _swept


def sweep_once(base: Path) -> None:
    """Remove the stale workspaces (and their cgroups) under `base`, once per process."""
    if base in _swept:
        return
    _swept.add(base)
    with contextlib.suppress(FileNotFoundError):
        for workspace in base.iterdir():
            if workspace.is_dir() and not (workspace / KEPT_MARKER).exists():
                _remove_if_stale(workspace)


def _remove_if_stale(workspace: Path) -> None:
    try:
        fd: int | None = os.open(workspace / LOCK_FILE, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        # Not locked yet (being created right now) or never locked (the executor died first).
        if time.time() - workspace.stat().st_mtime < _UNLOCKED_GRACE_SEC:
            return
        fd = None
    try:
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return
        logger.info("removing stale sandbox workspace %s", workspace)
        CgroupLeaf.discard(cgroup_name(workspace))
        remove_workspace(workspace)
    except (OSError, RuntimeError) as exc:
        logger.warning("cannot remove stale sandbox workspace %s: %s", workspace, exc)
    finally:
        if fd is not None:
            os.close(fd)


def cgroup_name(workspace: Path) -> str:
    return f"regatta-{workspace.name}"
