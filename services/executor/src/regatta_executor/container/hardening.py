"""What keeps a container from the host beyond Docker's defaults: an engine whose root is not the
host's root, and log folders with a total size cap.

Root in a container is root on the host unless the engine remaps user namespaces (dockerd's
`userns-remap`) or runs rootless: a kernel or runtime escape would then land as host root, and every
file the container's root writes through a mount is host root's. An engine doing neither is refused
(docs/deployment.md), unless the operator says every task is trusted (`allow_host_root`).

/logs (the agent's logs and artifacts together) and /logs/verifier are each a tmpfs volume of a fixed
size: the writable layer has no size cap on most engines (overlay2 caps only on xfs with pquota), and
without one an agent could fill the engine's disk through its log folders. They are anonymous
volumes, removed with their container (`v=True`); the engine's archive API reads and writes volumes,
where it does not see a container's own tmpfs mounts. Their pages are charged to the memory limit of
the container that writes them.
"""

from __future__ import annotations

import re
import threading
import time
import weakref
from dataclasses import dataclass

import docker
from docker.types import DriverConfig, Mount

LOGS = "/logs"
VERIFIER_LOGS = "/logs/verifier"
# How long an answer about the engine's user namespaces is trusted: changing it restarts the engine.
_CHECK_TTL_SEC = 60.0
# A remapping engine keeps its data under <data-root>/<uid>.<gid>, the host ids of its containers' root.
_REMAPPED_ROOT_DIR = re.compile(r"/(\d+)\.(\d+)/?$")
_lock = threading.Lock()
# Per client object: a client's base_url is the same for every unix socket.
_checked: weakref.WeakKeyDictionary[docker.DockerClient, tuple[float, EngineRoot]]
_checked = weakref.WeakKeyDictionary()


class HostRootError(RuntimeError):
    """The engine runs containers as the host's root; no untrusted task may run on it."""


@dataclass(frozen=True)
class EngineRoot:
    remapped: bool
    """Containers run as an unprivileged host uid (userns-remap or rootless)."""
    host_ids: tuple[int, int] | None = None
    """The host uid and gid of a container's root, when the engine says (userns-remap)."""


def engine_root(client: docker.DockerClient) -> EngineRoot:
    """Who a container's root is on the host, as the engine reports it."""
    now = time.monotonic()
    with _lock:
        seen = _checked.get(client)
        if seen and now - seen[0] < _CHECK_TTL_SEC:
            return seen[1]
    info = client.info()
    # Each option reads like "name=seccomp,profile=default".
    options = info.get("SecurityOptions") or []
    names = {part[5:] for option in options for part in option.split(",") if part.startswith("name=")}
    ids = _REMAPPED_ROOT_DIR.search(str(info.get("DockerRootDir") or "")) if "userns" in names else None
    found = EngineRoot(
        remapped=bool(names & {"userns", "rootless"}),
        host_ids=(int(ids.group(1)), int(ids.group(2))) if ids else None,
    )
    with _lock:
        _checked[client] = (now, found)
    return found


def require_remapped_root(client: docker.DockerClient) -> EngineRoot:
    root = engine_root(client)
    if not root.remapped:
        raise HostRootError(
            "the Docker engine runs containers as the host's root (no userns-remap, not rootless): "
            'set "userns-remap": "default" in /etc/docker/daemon.json and restart dockerd '
            "(docs/deployment.md), or set allow_host_root in the environment's kwargs if every "
            "task is trusted"
        )
    return root


def _tmpfs_volume(target: str, size_mb: int, labels: dict[str, str], root: EngineRoot) -> Mount:
    # The engine mounts the tmpfs as the host's root: its top folder is given to the container's
    # root, as the rest of the container's files are (else it could not chmod it).
    owner = f",uid={root.host_ids[0]},gid={root.host_ids[1]}" if root.host_ids else ""
    options = {"type": "tmpfs", "device": "tmpfs", "o": f"size={size_mb}m,mode=0777,nosuid,nodev{owner}"}
    driver = DriverConfig("local", options)
    # no_copy: what an image holds at the path is not copied in (nor counted against the cap).
    return Mount(target, None, type="volume", no_copy=True, driver_config=driver, labels=labels)


def log_mounts(size_mb: int, labels: dict[str, str], root: EngineRoot) -> list[Mount]:
    """/logs (agent and artifacts together) and /logs/verifier, each capped at `size_mb`."""
    return [_tmpfs_volume(path, size_mb, labels, root) for path in (LOGS, VERIFIER_LOGS)]
