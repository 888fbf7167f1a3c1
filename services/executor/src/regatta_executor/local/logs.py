"""The trial's log folders while a sandbox runs: held in the sandbox's workspace (on capped tmpfs mounts
when a storage cap is set) and bind-mounted over the trial's host folders, so that Harbor reads and writes
them at the same paths (a mount, not a link: Harbor refuses output paths that traverse links).

When the sandbox stops, each host folder gets back plain folders and regular files only: a link planted
by the sandbox must not lead a host reader elsewhere.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from regatta_executor.local import files as sandbox_files
from regatta_executor.local import janitor as sandbox_janitor
from regatta_executor.local import storage


def stage(workspace: Path, uid: int, host_folder: Path, staged: Path) -> None:
    """Move what `host_folder` holds into `staged` (owned by the sandbox's `uid`) and bind `staged` over
    it. The host folder is recorded in the workspace first, for the janitor, should the executor die."""
    staged.mkdir(exist_ok=True)
    os.chown(staged, uid, uid)
    host_folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(staged, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        sandbox_files.copy_tree_in(host_folder, fd, uid)
    finally:
        os.close(fd)
    _empty(host_folder)
    sandbox_janitor.record_host_mount(workspace, host_folder)
    storage.bind_mount(staged, host_folder)


def unstage(host_folder: Path, staged: Path, log: logging.Logger) -> None:
    """Unmount `staged` from `host_folder` and copy back what the sandbox wrote there."""
    try:
        storage.unmount(host_folder)
    except OSError as exc:
        log.warning("cannot unmount %s: %s", host_folder, exc)
        return
    try:
        fd = os.open(staged, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        sandbox_files.copy_tree_out(fd, host_folder)
    except OSError as exc:
        log.warning("cannot copy %s back from the sandbox: %s", host_folder, exc)
    finally:
        os.close(fd)


def _empty(folder: Path) -> None:
    for child in folder.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
