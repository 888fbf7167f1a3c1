"""Regatta's `container` Harbor environment: one long-lived container per attempt on a Docker engine.

Reach it from Harbor with::

    environment={"import_path": "regatta_executor.container.environment:ContainerEnvironment",
                 "delete": True, "kwargs": {...ContainerEnvironmentOptions fields...}}

The image is the task's `[environment].docker_image` (pulled when missing) or built from its
`environment/` folder, once per content digest (images.py). Nothing of the host is mounted: files go
in and out through the engine's archive API, so Harbor downloads the log folders itself (the
environment is not `mounted`). Commands run through exec with the user, working directory,
environment and timeout Harbor asks for (execs.py).
"""

from __future__ import annotations

import asyncio
import re
import secrets
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any, override

from docker.errors import APIError, NotFound
from harbor.environments.base import BaseEnvironment, ExecResult, SandboxBuildFailedError
from harbor.environments.capabilities import EnvironmentCapabilities, EnvironmentResourceCapabilities
from harbor.environments.options import EnvironmentOptions
from harbor.models.trial.config import ResourceMode
from pydantic import Field, field_validator

from regatta_executor.capabilities import sandbox_capabilities
from regatta_executor.container import execs, files, janitor, pid1
from regatta_executor.container.engine import (
    LABEL_HOST,
    LABEL_MANAGED,
    LABEL_OWNER,
    LABEL_OWNERS,
    LABEL_SESSION,
    client,
    host_name,
)
from regatta_executor.container.hardening import EngineRoot, engine_root, log_mounts, require_remapped_root
from regatta_executor.container.images import (
    ImageBuildError,
    ImageCache,
    ResolvedImage,
)
from regatta_executor.container.network import ensure_sandbox_network

_MIB = 1024 * 1024
TESTS = PurePosixPath("/tests")
VERIFIER_LOGS = PurePosixPath("/logs/verifier")
LOG_DIRS = ("/logs/agent", "/logs/verifier", "/logs/artifacts")
BUILD_LOG = "environment-build.log"
_PUT_RETRIES = (0.0, 0.2, 0.5, 1.0, None)
# Docker's default capabilities minus those a task never needs and an attacker would like: raw
# sockets (spoofing on the bridge), device nodes, audit writes, file capabilities.
DEFAULT_CAP_DROP = ["NET_RAW", "MKNOD", "AUDIT_WRITE", "SETFCAP"]
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.-]")


class ContainerEnvironmentOptions(EnvironmentOptions):
    """Kwargs of the container environment (Harbor's `environment.kwargs`)."""

    state_dir: str | None = Field(
        default=None,
        description="Host folder for build locks, image use times and executor ownership; "
        "default <tmp>/regatta-containers. Executors sharing an engine must share it.",
    )
    default_memory_mb: int | None = Field(
        default=2048, ge=16, description="Memory limit (swap included) when the task sets none."
    )
    default_cpus: float | None = Field(default=None, gt=0, description="CPU limit when the task sets none.")
    default_storage_mb: int | None = Field(
        default=None,
        ge=1,
        description="Writable-layer size when the task sets none (only on engines "
        "whose storage driver supports a size, e.g. overlay2 on xfs with pquota).",
    )
    default_logs_mb: int = Field(
        default=1024,
        ge=1,
        description="Size of /logs (agent logs and artifacts together) and of /logs/verifier, each, "
        "when the task sets no storage_mb (a task's storage_mb caps them too).",
    )
    allow_host_root: bool = Field(
        default=False,
        description="Run on an engine whose containers run as the host's root (no userns-remap, "
        "not rootless). Only when every task is trusted.",
    )
    max_processes: int = Field(default=1024, ge=16, description="Process (pid) limit per container.")
    image_cache_max_mb: int | None = Field(
        default=20480, ge=1, description="Built images past this total are removed least recently used first."
    )
    max_download_mb: int = Field(
        default=1024,
        ge=1,
        description="Most an attempt may bring back out of its container (logs, artifacts).",
    )
    max_output_mb: int = Field(default=16, ge=1, description="Most of one command's stdout and stderr kept.")
    sandbox_network: str = Field(default="regatta-sandbox", description="Bridge network of `public` tasks.")
    sandbox_bridge: str = Field(default="regatta0", max_length=15, description="Its host interface name.")
    cap_drop: list[str] = Field(default=list(DEFAULT_CAP_DROP), description="Capabilities removed.")
    auto_mounting: bool = Field(default=False, description="Always false: nothing of the host is mounted.")

    @field_validator("auto_mounting")
    @classmethod
    def _never_mounted(cls, value: bool) -> bool:
        if value:
            raise ValueError("the container environment never bind-mounts host folders")
        return value

    @field_validator("cap_drop")
    @classmethod
    def _capabilities(cls, value: list[str]) -> list[str]:
        for name in value:
            if not re.fullmatch(r"[A-Z_]{2,32}", name):
                raise ValueError(f"{name!r} is not a capability name")
        return value


class ContainerEnvironment(BaseEnvironment):
    """One container per attempt, with a pid 1 the agent cannot ptrace (pid1.py), no new privileges,
    limits from task.toml, no host mounts and no engine socket; removed when the attempt ends
    (janitor.py removes the ones a killed executor left). `no-network` (and `allowlist`, enforced as
    no network) tasks get no network at all; `public` ones the isolated bridge of network.py."""

    options_model = ContainerEnvironmentOptions
    options: ContainerEnvironmentOptions

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._client = client()
        self._state_dir = Path(self.options.state_dir or Path(tempfile.gettempdir(), "regatta-containers"))
        token = secrets.token_hex(4)
        self._name = f"regatta-{_NAME_CHARS.sub('-', self.session_id)[:80]}-{token}"
        self._container_id: str | None = None
        self._main_pid = 0
        self._default_exec_user = "0"
        self._uploading_tests = False
        self._download_budget = self.options.max_download_mb * _MIB
        self.image: ResolvedImage | None = None
        self._engine_root = EngineRoot(remapped=False)
        self.enforced_limits: frozenset[str] = frozenset()

    @staticmethod
    @override
    def type() -> str:
        return "container"

    @property
    @override
    def capabilities(self) -> EnvironmentCapabilities:
        return sandbox_capabilities(mounted=False)

    @classmethod
    @override
    def resource_capabilities(cls) -> EnvironmentResourceCapabilities:
        return EnvironmentResourceCapabilities(cpu_limit=True, memory_limit=True, fractional_cpus=True)

    @override
    def _validate_definition(self) -> None:
        # Harbor lists its log folders as mounts too; only the ones it asks to bind from the host count.
        if self._host_mounts:
            targets = [m["target"] for m in self._host_mounts]
            raise ValueError(f"the container environment mounts no host folders (asked: {targets})")
        if (self.environment_dir / "docker-compose.yaml").exists():
            raise ValueError(
                "environment/docker-compose.yaml: compose-file tasks need Harbor's `docker` environment"
            )
        if not self.task_env_config.docker_image and not (self.environment_dir / "Dockerfile").is_file():
            raise FileNotFoundError(
                "environment/Dockerfile is missing and [environment].docker_image is not set"
            )

    @property
    def container_name(self) -> str:
        return self._name

    @override
    async def start(self, force_build: bool) -> None:
        check = engine_root if self.options.allow_host_root else require_remapped_root
        self._engine_root = await asyncio.to_thread(check, self._client)
        await asyncio.to_thread(janitor.sweep_once, self._client, self._owners_dir)
        self.image = await self._image(force_build)
        network = "none"
        if self._network_is_public:
            network = await asyncio.to_thread(
                ensure_sandbox_network,
                self._client,
                self.options.sandbox_network,
                self.options.sandbox_bridge,
                self._state_dir,
            )
        elif self._network_is_allowlist:
            self.logger.warning(
                "network_mode 'allowlist' runs without any network in the container environment"
            )
        self._container_id = await asyncio.to_thread(self._create_and_start, self.image.reference, network)
        # /solution and /tests made now save each upload a failed put and an exec for its folder.
        dirs = [*LOG_DIRS, "/solution", str(TESTS)]
        dirs += [self.task_env_config.workdir] if self.task_env_config.workdir else []
        make_dirs = self._ensure_dirs_command(dirs, chmod=False) + " && chmod 777 " + " ".join(LOG_DIRS)
        await self._root_shell(make_dirs)
        # pid 1 is the only process kept across the kill before the verifier (pid1.py).
        self._main_pid = 1
        await self._upload_environment_dir_after_start()

    @property
    def _owners_dir(self) -> Path:
        return self._state_dir / "owners"

    async def _image(self, force_build: bool) -> ResolvedImage:
        cache = ImageCache(
            self._client,
            self._state_dir,
            self.options.image_cache_max_mb * _MIB if self.options.image_cache_max_mb else None,
        )
        reference = self.task_env_config.docker_image
        try:
            if reference:
                return await asyncio.to_thread(cache.named, reference)
            self.trial_paths.trial_dir.mkdir(parents=True, exist_ok=True)
            network = "none" if not self._network_is_public else self.options.sandbox_network
            if network != "none":
                await asyncio.to_thread(
                    ensure_sandbox_network,
                    self._client,
                    self.options.sandbox_network,
                    self.options.sandbox_bridge,
                    self._state_dir,
                )
            with open(self.trial_paths.trial_dir / BUILD_LOG, "a", encoding="utf-8", errors="replace") as log:
                return await asyncio.to_thread(
                    cache.built,
                    self.environment_dir,
                    timeout_sec=self.task_env_config.build_timeout_sec,
                    network_mode=network,
                    log=log,
                    force=force_build,
                )
        except ImageBuildError as exc:
            raise SandboxBuildFailedError(str(exc)) from exc

    def _create_and_start(self, image: str, network: str) -> str:
        # pid 1 runs as its own uid: commands without a user run as the image's, as Harbor expects.
        inspected = self._client.api.inspect_image(image)
        image_id = str(inspected["Id"])
        self._default_exec_user = (inspected.get("Config") or {}).get("User") or "0"
        memory_mb = (
            self._resource_limit_value("memory", auto_mode=ResourceMode.LIMIT)
            or self.options.default_memory_mb
        )
        cpus = self._resource_limit_value("cpu", auto_mode=ResourceMode.LIMIT) or self.options.default_cpus
        storage_mb = self._effective_storage_mb or self.options.default_storage_mb
        enforced = {"pids", "logs"}
        labels = {
            LABEL_MANAGED: "1",
            LABEL_OWNER: janitor.owner_id(self._owners_dir),
            LABEL_HOST: host_name(),
            LABEL_OWNERS: janitor.owners_label(self._owners_dir),
            LABEL_SESSION: _NAME_CHARS.sub("-", self.session_id)[:200],
        }
        config: dict[str, Any] = {
            "image": image,
            "name": self._name,
            "hostname": "sandbox",
            "detach": True,
            **pid1.container_config(),
            "privileged": False,
            "security_opt": ["no-new-privileges"],
            "cap_drop": list(self.options.cap_drop),
            "network_mode": network,
            "pids_limit": self.options.max_processes,
            "log_config": {"type": "none", "config": {}},
            "labels": labels,
            "mounts": log_mounts(
                self._effective_storage_mb or self.options.default_logs_mb, labels, self._engine_root
            ),
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
        try:
            container = self._client.containers.create(**config)
            if storage_mb:
                enforced.add("storage")
        except APIError as exc:
            if not storage_mb or "storage" not in str(exc).lower():
                raise
            self.logger.warning("this engine cannot cap a container's storage: %s", exc)
            config.pop("storage_opt")
            container = self._client.containers.create(**config)
        self._container_id = container.id
        self.enforced_limits = frozenset(enforced)
        pid1.install(self._client.api, container.id, image_id)
        container.start()
        return str(container.id)

    @override
    async def stop(self, delete: bool) -> None:
        await asyncio.to_thread(self._remove, delete)

    def _remove(self, delete: bool) -> None:
        for ident in filter(None, (self._container_id, self._name)):
            try:
                if delete:
                    self._client.api.remove_container(ident, force=True, v=True)
                else:
                    self._client.api.kill(ident)
                return
            except NotFound:
                continue
            except APIError as exc:
                if exc.status_code == 409:  # already being removed
                    return
                raise

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
        resolved = self._resolve_user(user)
        output = await execs.run_command(
            self._client.api,
            self._running(),
            ["bash", "-c", command],
            env=self._merge_env(env) or {},
            user=self._default_exec_user if resolved is None else str(resolved),
            workdir=cwd or self.task_env_config.workdir,
            timeout_sec=timeout_sec,
            max_output_bytes=self.options.max_output_mb * _MIB,
        )
        return ExecResult(stdout=output.stdout, stderr=output.stderr, return_code=output.return_code)

    async def _root_shell(self, script: str) -> str:
        output = await execs.run_command(
            self._client.api,
            self._running(),
            ["/bin/sh", "-c", script],
            env={},
            user="0",
            workdir="/",
            timeout_sec=60,
            max_output_bytes=_MIB,
        )
        if output.return_code != 0:
            raise RuntimeError(
                f"container set-up command failed ({output.return_code}): {output.stderr.strip()}"
            )
        return output.stdout

    @override
    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        source, target = Path(source_path), files.container_path(target_path)
        await self._put(files.upload_file, source, target, str(PurePosixPath(target).parent))

    @override
    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        target = files.container_path(target_dir)
        if PurePosixPath(target) == TESTS and not self._uploading_tests:
            # The verifier starts now. Nothing the agent started may run alongside it or touch its
            # output, and nothing it left in /tests or /logs/verifier may count. Harbor uploads a
            # multi-step task's tests in several calls without an exec between them; only the first
            # of those clears.
            self._uploading_tests = True
            await execs.kill_all_but_main(
                self._client.api,
                self._running(),
                self._main_pid,
                then=self._empty_dirs_command([str(TESTS), str(VERIFIER_LOGS)], chmod=False)
                + f" && chmod 777 {VERIFIER_LOGS}",
            )
        await self._put(files.upload_dir, Path(source_dir), target, target)

    async def _put(self, upload: Any, source: Path, target: str, folder: str) -> None:
        container_id = self._running()
        for delay in _PUT_RETRIES:
            try:
                await asyncio.to_thread(upload, self._client.api, container_id, source, target)
                return
            except NotFound:
                if delay is None:
                    raise
            # A missing folder is made; if the engine still does not see it, its view of the
            # container's files lagged (seen on a loaded engine), so try again shortly.
            await self._root_shell(self._ensure_dirs_command([folder], chmod=False))
            await asyncio.sleep(delay)

    @override
    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        size = await asyncio.to_thread(
            files.download_file,
            self._client.api,
            self._running(),
            source_path,
            Path(target_path),
            self._download_budget,
        )
        self._download_budget -= size

    @override
    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        size = await asyncio.to_thread(
            files.download_dir,
            self._client.api,
            self._running(),
            source_dir,
            Path(target_dir),
            self._download_budget,
        )
        self._download_budget -= size

    def _running(self) -> str:
        if self._container_id is None:
            raise RuntimeError("the container environment has not been started")
        return self._container_id
