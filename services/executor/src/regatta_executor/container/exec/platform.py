"""What the platform puts in every container for itself, out of the agent's reach (tools.py): a
read-only bind mount at PLATFORM_DIR holding a static shell (PLATFORM_SHELL). The verifier's commands
start from it, so an agent that replaces /bin/bash or /bin/sh cannot run code of its own before the
tests do."""

from __future__ import annotations

from typing import Any

from regatta_executor.container.exec.tools import MOUNT_POINT as PLATFORM_DIR
from regatta_executor.container.exec.tools import SHELL as PLATFORM_SHELL

__all__ = ["PLATFORM_DIR", "PLATFORM_SHELL", "has_platform_mount"]


def has_platform_mount(container: dict[str, Any]) -> bool:
    """Whether the inspected container has the platform's folder bind-mounted read-only."""
    return any(
        mount.get("Destination") == PLATFORM_DIR and not mount.get("RW", True)
        for mount in container.get("Mounts") or []
    )
