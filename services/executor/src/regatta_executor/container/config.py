"""The engine's configuration of an attempt's container: name and labels (the janitor's ownership
marks), pid 1 and the platform's tools mount, Docker's default capabilities (less `cap_drop`), no
network unless public, the process, memory and CPU limits and the capped log folders."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import docker
from docker.errors import APIError

from regatta_executor.container import janitor
from regatta_executor.container.engine import (
    LABEL_MANAGED,
    LABEL_SESSION,
)
from regatta_executor.container.exec import pid1, tools
from regatta_executor.container.hardening import EngineRoot, log_mounts
from regatta_executor.container.options import ContainerEnvironmentOptions

_MIB = 1024 * 1024
NAME_CHARS = re.compile(r"[^A-Za-z0-9_.-]")


def container_config(
    *,
    image: str,
    name: str,
    session_id: str,
    network: str,
    workdir: str | None,
    image_entrypoint: Sequence[str],
    image_workdir: str,
    tools_dir: Path,
    options: ContainerEnvironmentOptions,
    owners_dir: Path,
    engine_root: EngineRoot,
    memory_mb: int | None,
    cpus: float | None,
    storage_mb: int | None,
    logs_mb: int,
) -> tuple[dict[str, Any], set[str]]:
    """The arguments of `containers.create` and the limits they enforce ("storage" excepted: whether
    the engine can cap a container's storage shows only when it creates one)."""
    enforced = {"pids", "logs"}
    labels = {
        LABEL_MANAGED: "1",
        **janitor.ownership_labels(owners_dir),
        LABEL_SESSION: NAME_CHARS.sub("-", session_id)[:200],
    }
    config: dict[str, Any] = {
        "image": image,
        "name": name,
        "hostname": "sandbox",
        "detach": True,
        # No user: the container runs as the image's USER, as under Harbor.
        **pid1.container_config(image_entrypoint, (image_workdir or "/") if workdir else None),
        "privileged": False,
        # The engine makes the task's WORKDIR (root-owned) when it creates the container.
        **({"working_dir": workdir} if workdir else {}),
        # No no-new-privileges, as under Harbor: an image's setuid programs (sudo, su, ping) work.
        # The boundary is the engine's user namespace (hardening.py), not the container's root.
        "cap_drop": list(options.cap_drop),
        "network_mode": network,
        "pids_limit": options.max_processes,
        "log_config": {"type": "none", "config": {}},
        "labels": labels,
        "mounts": [tools.mount(tools_dir), *log_mounts(logs_mb, labels, engine_root)],
    }
    if memory_mb:
        config["mem_limit"] = memory_mb * _MIB
        config["memswap_limit"] = memory_mb * _MIB
        enforced.add("memory")
    if cpus:
        config["nano_cpus"] = int(float(cpus) * 1e9)
        enforced.add("cpu")
    if storage_mb:
        config["storage_opt"] = {"size": f"{storage_mb}M"}
    return config, enforced


def create_container(
    client: docker.DockerClient, config: dict[str, Any], enforced: set[str], logger: logging.Logger
) -> docker.models.containers.Container:
    """Create the container of `config`. Whether the engine can cap a container's storage shows only
    here: where it cannot (overlay2 without project quotas), the container is made without the cap, the
    attempt's log says so, and "storage" stays out of `enforced`."""
    try:
        container = client.containers.create(**config)
    except APIError as exc:
        if "storage_opt" not in config or "storage" not in str(exc).lower():
            raise
        logger.warning("this engine cannot cap a container's storage: %s", exc)
        config.pop("storage_opt")
        return client.containers.create(**config)
    if "storage_opt" in config:
        enforced.add("storage")
    return container
