"""The disk a sandbox writes a task's files on: what a task's `[environment].storage_mb` is measured
against when the operator sets no REGATTA_MAX_STORAGE_MB (regatta_shared.rules.ceilings).

Harbor reads storage_mb as a disk request. In the `container` environment a task's files land in its
container's writable layer, on the Docker engine's storage, so the ceiling is the size of the filesystem
holding the engine's data root (`DockerRootDir` of its /info), measured where this process can see that
folder. A process that cannot see it (one without the engine's socket, as compose.yaml's registry-sync and
gateway, or an executor in a container or with an engine on another host) measures the filesystem of its
own REGATTA_DATA_DIR instead: on a one-host deployment that is the same disk, and every message names the
folder measured. The `local` environment keeps a task's files in tmpfs, in memory: it gets no disk here,
and its ceiling stays half the host's RAM.

The filesystem's size, not its free space: storage_mb caps what a task may write and reserves nothing, and
a ceiling that followed the image cache's growth would list a task valid one hour and invalid the next.
Measured once per process and kept for a few minutes (the gateway checks every run submission).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

_MIB = 1024 * 1024
LOCAL = "local"
# The same environment named by its class (REGATTA_EXECUTOR_ENVIRONMENT takes module:Class too).
LOCAL_CLASS = "regatta_executor.local.environment:LocalEnvironment"
AUTO = "auto"
DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"
_ENGINE_TIMEOUT_SEC = 5.0
_KEPT_SEC = 300.0


@dataclass(frozen=True)
class Disk:
    mib: int
    what: str
    """The disk in words, for a message: `this host's disk, the filesystem of … /var/lib/docker`."""


@dataclass(frozen=True)
class EngineRoot:
    answered: bool
    """Whether an engine answered on this host's socket (False too for an engine elsewhere)."""
    root: str | None


def filesystem_mib(path: str | Path) -> int | None:
    """The size of the filesystem holding `path`, in MiB; None where it cannot be seen from here."""
    try:
        stats = os.statvfs(path)
    except (OSError, ValueError):
        return None
    return stats.f_blocks * stats.f_frsize // _MIB


def engine_root(docker_host: str) -> EngineRoot:
    """The data root of the engine at `docker_host`, asked over its socket. An engine on another host
    (tcp://, ssh://) is not asked: its folders are not on this one."""
    if not docker_host.startswith("unix://"):
        return EngineRoot(False, None)
    socket_path = docker_host.removeprefix("unix://")
    if not os.path.exists(socket_path):
        return EngineRoot(False, None)
    try:
        transport = httpx.HTTPTransport(uds=socket_path)
        with httpx.Client(transport=transport, timeout=_ENGINE_TIMEOUT_SEC) as client:
            response = client.get("http://engine/info")
            response.raise_for_status()
            root = response.json().get("DockerRootDir")
    except (httpx.HTTPError, ValueError, OSError):
        return EngineRoot(False, None)
    return EngineRoot(True, root if isinstance(root, str) and root.startswith("/") else None)


def sandbox_disk(environment: str, *, docker_host: str, data_dir: Path) -> Disk | None:
    """The disk the sandboxes of `environment` write on; None where they keep a task's files in memory
    (`local`, and `auto` when no engine answers here, since executors then choose `local`)."""
    kind = environment.strip()
    if kind in (LOCAL, LOCAL_CLASS):
        return None
    engine = engine_root(docker_host)
    if engine.root is not None and (mib := filesystem_mib(engine.root)) is not None:
        return Disk(mib, f"this host's disk, the filesystem of the Docker engine's data root {engine.root}")
    if kind == AUTO and not engine.answered and docker_host.startswith("unix://"):
        return None
    folder = data_dir.resolve()
    # The folder may not be made yet: its nearest existing parent is on the disk it will be made on.
    existing = next((path for path in (folder, *folder.parents) if path.exists()), folder)
    mib = filesystem_mib(existing)
    if mib is None:
        return None
    return Disk(
        mib,
        f"this host's disk, the filesystem of REGATTA_DATA_DIR {folder}, as the Docker engine's data "
        "root is not visible from this process",
    )


_kept: dict[tuple[str, str, str], tuple[float, Disk | None]] = {}
_lock = threading.Lock()


def sandbox_disk_kept(environment: str, *, data_dir: Path) -> Disk | None:
    """`sandbox_disk` for DOCKER_HOST (else the local socket), measured at most every few minutes."""
    docker_host = os.environ.get("DOCKER_HOST") or DEFAULT_DOCKER_HOST
    key = (environment, docker_host, str(data_dir))
    with _lock:
        kept = _kept.get(key)
        if kept is not None and time.monotonic() - kept[0] < _KEPT_SEC:
            return kept[1]
    disk = sandbox_disk(environment, docker_host=docker_host, data_dir=data_dir)
    with _lock:
        _kept[key] = (time.monotonic(), disk)
    return disk
