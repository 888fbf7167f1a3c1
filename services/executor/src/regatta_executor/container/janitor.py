"""Ownership of containers, and removal of those an executor left when it was killed.

Each executor process holds an exclusive flock on `<owners_dir>/<owner id>.lock` for as long as it
lives; the kernel drops it however the process dies. Containers are labelled with their owner, host
and owners folder, so a container of this host and folder whose owner's lock can be taken belongs to
a dead executor. Executors with another owners folder (another state_dir) are never judged.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import re
import secrets
import threading
from pathlib import Path

import docker
from docker.errors import APIError, NotFound

from regatta_executor.container import allowlist
from regatta_executor.container.engine import (
    LABEL_HOST,
    LABEL_MANAGED,
    LABEL_OWNER,
    LABEL_OWNERS,
    host_name,
)

logger = logging.getLogger(__name__)
_OWNER_ID = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
_lock = threading.Lock()
_owners: dict[Path, tuple[str, int]] = {}
_swept: set[tuple[str, str]] = set()


def owner_id(owners_dir: Path) -> str:
    """This process's owner id under `owners_dir`, its lock taken there once (and held until exit)."""
    with _lock:
        if owners_dir not in _owners:
            owners_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            name = f"{os.getpid()}-{secrets.token_hex(6)}"
            fd = os.open(owners_dir / f"{name}.lock", os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            _owners[owners_dir] = (name, fd)
        return _owners[owners_dir][0]


def ownership_labels(owners_dir: Path) -> dict[str, str]:
    """The labels that let the janitor judge a container: this executor, this host, this owners folder."""
    return {
        LABEL_OWNER: owner_id(owners_dir),
        LABEL_HOST: host_name(),
        LABEL_OWNERS: owners_label(owners_dir),
    }


def owners_label(owners_dir: Path) -> str:
    """The value of the owners-folder label: which executors may judge a container's owner."""
    return hashlib.sha256(str(owners_dir.resolve()).encode()).hexdigest()[:16]


def owner_alive(owners_dir: Path, owner: str) -> bool:
    """Whether the executor that took `owner` still holds its lock (a missing file: it is gone)."""
    if not _OWNER_ID.match(owner):
        return False
    try:
        fd = os.open(owners_dir / f"{owner}.lock", os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    with contextlib.suppress(FileNotFoundError):
        (owners_dir / f"{owner}.lock").unlink()
    return False


def sweep(client: docker.DockerClient, owners_dir: Path) -> list[str]:
    """Remove this host's Regatta containers whose owner executor is dead; returns their names."""
    me = owner_id(owners_dir)
    removed = []
    containers = client.containers.list(
        all=True,
        filters={
            "label": [
                f"{LABEL_MANAGED}=1",
                f"{LABEL_HOST}={host_name()}",
                f"{LABEL_OWNERS}={owners_label(owners_dir)}",
            ]
        },
    )
    for container in containers:
        owner = container.labels.get(LABEL_OWNER, "")
        if owner == me or owner_alive(owners_dir, owner):
            continue
        logger.info("removing container %s left by dead executor %s", container.name, owner)
        with contextlib.suppress(NotFound):
            try:
                container.remove(force=True, v=True)  # its log volumes too
                removed.append(container.name)
            except APIError as exc:
                logger.warning("cannot remove container %s: %s", container.name, exc)
    # The firewall rules, sets and resolvers of allowlist attempts whose container is gone.
    for attempt in allowlist.sweep(client):
        logger.info("closed allowlist %s left by a dead executor", attempt)
    return removed


def sweep_once(client: docker.DockerClient, owners_dir: Path) -> None:
    """`sweep`, once per process and owners folder (an executor sweeps when it starts)."""
    key = (str(owners_dir), host_name())
    with _lock:
        if key in _swept:
            return
        _swept.add(key)
    sweep(client, owners_dir)
