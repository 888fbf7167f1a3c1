"""Regatta's `local` Harbor environment: the trial runs on this host inside a bubblewrap sandbox.

Reach it from Harbor with::

    environment={"import_path": "regatta_executor.local.environment:LocalEnvironment",
                 "delete": True, "kwargs": {...LocalEnvironmentOptions fields...}}

The task's Dockerfile is not built; only its last WORKDIR is used. The host's /usr, /etc and /opt are
mounted read-only, so tasks can use what the host has installed but cannot install anything; /var is
the sandbox's own (empty), and the host's secrets in /etc (shadow, SSH host keys) are masked.

Commands run as root *inside a user namespace*: outside, every process of the sandbox is an unprivileged
host uid of its own (a task's `user` is ignored: every command runs as that namespace's root), with
Docker's default capabilities minus MKNOD and NET_RAW, valid in the sandbox's own namespaces only. Kernel
tunables (/proc/sys, /proc/sysrq-trigger) are owned by the host's root and stay read-only; /sys is not
mounted.

The sandbox always has its own network namespace. `no-network` and `allowlist` tasks get loopback only
(an allowlist is enforced as no network at all); `public` tasks get outbound access through slirp4netns,
with the host's loopback, the host's addresses and private networks unreachable (network.py).

The writable root is a tmpfs of `[environment].storage_mb` (else `default_storage_mb`), and so are the
log folders /logs/agent and /logs/artifacts together, and /logs/verifier; see storage.py for why, and
what it costs. Before the verifier runs (when Harbor uploads /tests), every process the agent left is
killed and /logs/verifier emptied.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import tempfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar, override

from harbor.environments.base import BaseEnvironment, ExecResult
from harbor.environments.capabilities import EnvironmentCapabilities, EnvironmentResourceCapabilities
from harbor.environments.options import EnvironmentOptions
from harbor.models.trial.config import ResourceMode
from pydantic import Field, field_validator
from regatta_shared.events.integrity import VerifierIntegrity
from regatta_shared.rules.environment_traits import LOCAL, EnvironmentTraits

from regatta_executor.environments.capabilities import sandbox_capabilities
from regatta_executor.local.limits import Limits
from regatta_executor.local.sandbox import Sandbox
from regatta_executor.local.spec import DEFAULT_HOST_DIRS, TESTS, Bind, SandboxSpec

_WORKDIR = re.compile(r"^\s*WORKDIR\s+(.+?)\s*$", re.IGNORECASE)
_MIB = 1024 * 1024
_SMALL_COPY_ENTRIES = 64
_SMALL_COPY_BYTES = 256 * 1024


class LocalEnvironmentOptions(EnvironmentOptions):
    """Kwargs of the local environment (Harbor's `environment.kwargs`)."""

    auto_mounting: bool = Field(
        default=True,
        description="Always true: the trial's log folders are bind-mounted into the sandbox.",
    )
    sandbox_dir: str | None = Field(
        default=None,
        description="Host folder for per-trial sandbox roots; default <tmp>/regatta-sandboxes.",
    )
    default_memory_mb: int | None = Field(
        default=2048, ge=16, description="Memory limit when the task sets no [environment].memory_mb."
    )
    default_cpus: float | None = Field(
        default=None, gt=0, description="CPU limit when the task sets no [environment].cpus."
    )
    default_storage_mb: int | None = Field(
        default=4096,
        ge=1,
        description="Size of the sandbox's writable root (a tmpfs, so it counts against the memory "
        "limit as it fills) when the task sets no [environment].storage_mb; None for no cap.",
    )
    max_processes: int | None = Field(default=512, ge=16, description="Process (pid) limit per sandbox.")
    cpu_time_sec: int | None = Field(default=None, ge=1, description="RLIMIT_CPU of every sandbox process.")
    use_cgroups: bool = Field(default=True, description="Enforce limits with cgroups where possible.")
    host_dirs: list[str] = Field(
        default=list(DEFAULT_HOST_DIRS),
        description="Host folders mounted read-only at the same place; the sandbox can read all of them.",
    )
    start_timeout_sec: float = Field(default=30.0, gt=0)
    verifier_integrity: VerifierIntegrity = Field(
        default="record",
        description="`record`: what the agent started keeps running into verification, as under Harbor; "
        "`enforce`: every process of the agent is killed before the verifier starts (set per run).",
    )

    @field_validator("host_dirs")
    @classmethod
    def _absolute_dirs(cls, value: list[str]) -> list[str]:
        for host_dir in value:
            if not host_dir.startswith("/") or host_dir.rstrip("/") == "":
                raise ValueError(f"{host_dir!r} is not an absolute folder other than /")
        return value

    @field_validator("auto_mounting")
    @classmethod
    def _always_mounted(cls, value: bool) -> bool:
        if not value:
            raise ValueError("the local environment always bind-mounts the trial's log folders")
        return value


class LocalEnvironment(BaseEnvironment):
    """One long-lived bubblewrap sandbox per trial; its pid 1 starts every command (see sandbox.py)."""

    options_model = LocalEnvironmentOptions
    options: LocalEnvironmentOptions
    TRAITS: ClassVar[EnvironmentTraits] = LOCAL

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("auto_mounting", True)
        super().__init__(*args, **kwargs)
        self._sandbox: Sandbox | None = None
        self._workdir = self._resolve_workdir()
        self._uploading_tests = False

    @staticmethod
    @override
    def type() -> str:
        return "local"

    @property
    @override
    def capabilities(self) -> EnvironmentCapabilities:
        return sandbox_capabilities(mounted=True)

    @classmethod
    @override
    def resource_capabilities(cls) -> EnvironmentResourceCapabilities:
        return EnvironmentResourceCapabilities(cpu_limit=True, memory_limit=True, fractional_cpus=True)

    @override
    def _validate_definition(self) -> None:
        unsupported = [m["target"] for m in self._mounts if m.get("type", "bind") != "bind"]
        if unsupported:
            raise ValueError(f"the local environment supports only bind mounts, not for {unsupported}")
        if (self.environment_dir / "docker-compose.yaml").exists():
            self.logger.warning("the local environment ignores docker-compose.yaml: no sidecar services run")

    @property
    def sandbox_root(self) -> Path | None:
        """Host folder mounted as the sandbox's `/` while the environment runs."""
        return self._sandbox.root if self._sandbox else None

    @property
    def enforced_limits(self) -> frozenset[str]:
        """Which of "pids", "memory", "cpu", "storage" are enforced (by cgroups, pids otherwise by the pid
        namespace, storage by a tmpfs root); without a memory cgroup, memory falls back to RLIMIT_AS."""
        return self._sandbox.enforced_limits if self._sandbox else frozenset()

    @override
    async def start(self, force_build: bool) -> None:
        if self._network_is_allowlist:
            self.logger.warning("network_mode 'allowlist' runs without any network in the local environment")
        base = Path(self.options.sandbox_dir or Path(tempfile.gettempdir(), "regatta-sandboxes"))
        workspace = base / f"{self.session_id}-{secrets.token_hex(4)}"
        trial_dir = self.trial_paths.trial_dir.resolve()
        binds = []
        for mount in self._mounts:
            source = Path(mount["source"])
            in_trial = source.resolve().is_relative_to(trial_dir)
            if in_trial:
                source.mkdir(parents=True, exist_ok=True)
            target, read_only = PurePosixPath(mount["target"]), bool(mount.get("read_only"))
            binds.append(Bind(source, target, read_only, log_folder=in_trial))
        spec = SandboxSpec(
            workspace=workspace,
            workdir=self._workdir,
            network=self._network_is_public,
            binds=tuple(binds),
            host_dirs=tuple(self.options.host_dirs),
            limits=self._limits(),
            cpu_time_sec=self.options.cpu_time_sec,
            storage_bytes=self._storage_bytes(),
            use_cgroups=self.options.use_cgroups,
            start_timeout_sec=self.options.start_timeout_sec,
        )
        self._sandbox = Sandbox(spec, self.logger)
        await self._sandbox.start()
        await self._upload_environment_dir_after_start()

    @override
    async def stop(self, delete: bool) -> None:
        if self._sandbox is not None:
            await self._sandbox.stop(delete=delete)

    @override
    async def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> ExecResult:
        self._uploading_tests = False
        result = await self._running().exec(
            command,
            cwd=cwd or str(self._workdir),
            env=self._merge_env(env),
            timeout_sec=timeout_sec,
            on_output=self._output_callback(),
        )
        return ExecResult(stdout=result.stdout, stderr=result.stderr, return_code=result.return_code)

    @override
    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        source = Path(source_path)
        await _copy(self._running().files.upload_file, source, target_path, small=_is_small(source))

    @override
    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        source = Path(source_dir)
        files = self._running().files
        if PurePosixPath("/", target_dir) == TESTS and not self._uploading_tests:
            # The verifier's phase begins, and /logs/verifier and /tests start empty (a conftest.py the
            # agent left there must not count). Under `enforce`, whatever the agent left running could
            # rig the verifier's output or read its secrets: every process goes (pid 1's kill(-1),
            # sound whatever the processes' names or fork rate). Under `record`, as under Harbor, they
            # keep running (a server the tests talk to). Harbor uploads a multi-step task's tests in
            # several calls, without an exec between them; only the first of those clears.
            self._uploading_tests = True
            await self._running().reset_for_verifier(kill=self.options.verifier_integrity == "enforce")
            await asyncio.to_thread(files.clear_dir, str(TESTS))
        await _copy(files.upload_dir, source, target_dir, small=_is_small(source))

    @override
    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        await asyncio.to_thread(self._running().files.download_file, source_path, Path(target_path))

    @override
    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        await asyncio.to_thread(self._running().files.download_dir, source_dir, Path(target_dir))

    def _running(self) -> Sandbox:
        if self._sandbox is None:
            raise RuntimeError("the local environment has not been started")
        return self._sandbox

    def _limits(self) -> Limits:
        memory_mb = self._resource_limit_value("memory", auto_mode=ResourceMode.LIMIT)
        cpus = self._resource_limit_value("cpu", auto_mode=ResourceMode.LIMIT)
        memory_mb = memory_mb or self.options.default_memory_mb
        return Limits(
            memory_bytes=memory_mb * _MIB if memory_mb else None,
            cpus=cpus or self.options.default_cpus,
            max_processes=self.options.max_processes,
        )

    def _storage_bytes(self) -> int | None:
        storage_mb = self._effective_storage_mb or self.options.default_storage_mb
        return storage_mb * _MIB if storage_mb else None

    def _resolve_workdir(self) -> PurePosixPath:
        if self.task_env_config.workdir:
            return PurePosixPath("/", self.task_env_config.workdir)
        return dockerfile_workdir(self.environment_dir / "Dockerfile") or PurePosixPath("/")


async def _copy[S, T](copy: Callable[[S, T], None], source: S, target: T, *, small: bool) -> None:
    """Small copies (a task's tests and solution, typically) run inline: handing them to a thread and
    back costs more than the copy. Large ones go to a thread so that the event loop keeps running."""
    if small:
        copy(source, target)
    else:
        await asyncio.to_thread(copy, source, target)


def _is_small(source: Path) -> bool:
    pending, entries, size = [source], 0, 0
    try:
        while pending:
            path = pending.pop()
            info = path.stat()
            entries, size = entries + 1, size + info.st_size
            if entries > _SMALL_COPY_ENTRIES or size > _SMALL_COPY_BYTES:
                return False
            if path.is_dir():
                pending += path.iterdir()
    except OSError:
        return False
    return True


def dockerfile_workdir(dockerfile: Path) -> PurePosixPath | None:
    """The working directory the image would have: WORKDIR instructions in order, relative ones joined
    to the previous. Build arguments and environment variables are not expanded."""
    try:
        lines = dockerfile.read_text().splitlines()
    except OSError:
        return None
    workdir: PurePosixPath | None = None
    for line in lines:
        match = _WORKDIR.match(line)
        if match:
            workdir = PurePosixPath(workdir or "/", match.group(1).strip("\"'"))
    return workdir
