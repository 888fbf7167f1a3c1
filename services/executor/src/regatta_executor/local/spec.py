"""What a bubblewrap sandbox is asked to be (`SandboxSpec`, its `Bind`s) and what a command in it
returns (`CommandResult`); the sandbox itself is sandbox.py."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from regatta_executor.local.limits import Limits

# Not /var: its lib/, log/, cache/ and spool/ hold other services' data; the sandbox gets empty ones.
DEFAULT_HOST_DIRS = ("/usr", "/etc", "/opt")
TESTS = PurePosixPath("/tests")
VERIFIER_LOGS = PurePosixPath("/logs/verifier")
# Host uids for sandboxes: unused by any account, one picked at random per sandbox so that no two
# sandboxes (nor any host service) share one in practice.
SANDBOX_UIDS = range(2_000_000_000, 2_001_000_000)


def pick_uid() -> int:
    return SANDBOX_UIDS.start + secrets.randbelow(len(SANDBOX_UIDS))


@dataclass(frozen=True)
class Bind:
    source: Path
    target: PurePosixPath
    read_only: bool = False
    log_folder: bool = False
    """A trial log folder: staged in the workspace (capped) while the sandbox runs, copied back to
    `source` when it stops."""


@dataclass(frozen=True)
class SandboxSpec:
    workspace: Path
    workdir: PurePosixPath
    network: bool
    binds: tuple[Bind, ...] = ()
    host_dirs: tuple[str, ...] = DEFAULT_HOST_DIRS
    limits: Limits = field(default_factory=Limits)
    cpu_time_sec: int | None = None
    storage_bytes: int | None = None
    use_cgroups: bool = True
    start_timeout_sec: float = 30.0
    uid: int = field(default_factory=pick_uid)


@dataclass(frozen=True)
class CommandResult:
    return_code: int
    stdout: str | None
    stderr: str | None
