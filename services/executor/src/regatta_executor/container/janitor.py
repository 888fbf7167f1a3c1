"""Ownership of containers, and removal of those an executor left when it was killed.

Each executor process holds an exclusive flock on `<owners_dir>/<owner id>.lock` for as long as it
lives; the kernel drops it however the process dies. Containers are labelled with their owner, host
and owners folder, so a container of this host and folder whose owner's lock can be taken belongs to
a dead executor. Executors with another owners folder (another state_dir) are never judged.

Sweeps run while other executors create and remove containers: a container listed may be gone (or
being removed) a moment later. The listing is one call that carries the labels (no inspect per
container), and a container that vanished or is already being removed is skipped, never an error.
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
from docker.errors import APIError, NotFound

from regatta_executor.container.engine import (
    LABEL_HOST,
    LABEL_MANAGED,
    LABEL_OWNER,
    LABEL_OWNERS,
    host_name,
)
from regatta_executor.container.network import allowlist

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
            # Locked under a temporary name, then renamed: a sweep must never find the lock file of a
            # live owner unlocked (it would take the owner for dead and remove the file).
            staged = owners_dir / f".{name}.staged"
            fd = os.open(staged, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_CLOEXEC, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.rename(staged, owners_dir / f"{name}.lock")
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


def listed(client: docker.DockerClient, owners_dir: Path) -> list[dict[str, Any]]:
    """This host's Regatta containers judged with `owners_dir`, as the engine lists them (with labels)."""
    filters = {
        "label": [
            f"{LABEL_MANAGED}=1",
            f"{LABEL_HOST}={host_name()}",
            f"{LABEL_OWNERS}={owners_label(owners_dir)}",
        ]
    }
    return list(client.api.containers(all=True, filters=filters))


def remove_dead(client: docker.DockerClient, owners_dir: Path, containers: list[dict[str, Any]]) -> list[str]:
    """Remove those of `containers` (engine listings) whose owner executor is dead; their names."""
    me = owner_id(owners_dir)
    removed = []
    for container in containers:
        labels = container.get("Labels") or {}
        owner = str(labels.get(LABEL_OWNER, ""))
        if owner == me or owner_alive(owners_dir, owner):
            continue
        name = str((container.get("Names") or [container.get("Id", "")])[0]).lstrip("/")
        logger.info("removing container %s left by dead executor %s", name, owner)
        try:
            client.api.remove_container(container["Id"], force=True, v=True)  # its log volumes too
        except NotFound:
            continue  # removed meanwhile (by its attempt, or another sweep)
        except APIError as exc:
            if exc.status_code != 409:  # 409: its removal is already in progress
                logger.warning("cannot remove container %s: %s", name, exc)
            continue
        removed.append(name)
    return removed


def sweep(client: docker.DockerClient, owners_dir: Path) -> list[str]:
    """Remove this host's Regatta containers whose owner executor is dead, then close the allowlists
    (firewall rules, sets, resolvers) of attempts whose container is gone; returns the containers' names."""
    removed = remove_dead(client, owners_dir, listed(client, owners_dir))
    for attempt in allowlist.sweep(client):
        logger.info("closed allowlist %s left by a dead executor", attempt)
    return removed


def sweep_once(
    client: docker.DockerClient, owners_dir: Path, *more: Callable[[docker.DockerClient, Path], object]
) -> None:
    """`sweep`, and the `more` sweeps of what attempts leave beside containers (compose networks and
    volumes), once per process and owners folder (an executor sweeps when it starts)."""
    key = (str(owners_dir), host_name())
    with _lock:
        if key in _swept:
            return
        _swept.add(key)
    sweep(client, owners_dir)
    for also in more:
        also(client, owners_dir)
