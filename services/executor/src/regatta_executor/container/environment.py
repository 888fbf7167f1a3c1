"""Regatta's `container` Harbor environment: one long-lived container per attempt on a Docker engine.

Reach it from Harbor with::

    environment={"import_path": "regatta_executor.container.environment:ContainerEnvironment",
                 "delete": True, "kwargs": {...ContainerEnvironmentOptions fields...}}

The image is the task's `[environment].docker_image` (an allow-listed local image, or pulled from a
registry the outbound policy allows) or built from its `environment/` folder, once per content digest
(images.py; what the Dockerfile may fetch: dockerfile_policy.py). Nothing of the host is mounted: files go
in and out through the engine's archive API, so Harbor downloads the log folders itself (the
environment is not `mounted`). Commands run through exec with the user, working directory,
environment and timeout Harbor asks for (execs.py).

Every engine round trip costs tens of milliseconds of the engine's CPU (an exec as much as an archive
transfer), so the environment makes no more of them than Harbor's calls need, and only where the result
is provably the same: uploads wait and go in together, as one archive, with the next operation that
could see them (so `chmod +x` of a file still waiting is done in its header); a folder read back is
archived once and the following reads and `test -d` checks of Harbor are answered from that archive
until anything runs in the container; the log folders go in with the first upload; ending the agent's
processes and emptying the verifier's folders is done by Harbor's own removal of stale reward files.

The kwargs are options.py, the container's engine configuration config.py, the file transfers
transfers.py and what the environment knows of Harbor's own commands harbor_commands.py.
"""

from __future__ import annotations

import secrets
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any, override

from docker.errors import APIError, NotFound
from harbor.environments.base import ExecResult, SandboxBuildFailedError
from harbor.environments.capabilities import EnvironmentCapabilities, EnvironmentResourceCapabilities
from harbor.models.trial.config import ResourceMode
from regatta_shared.outbound import OutboundPolicy

from regatta_executor.capabilities import sandbox_capabilities
from regatta_executor.container import execs, files, janitor
from regatta_executor.container.config import NAME_CHARS, container_config, create_container
from regatta_executor.container.engine import client
from regatta_executor.container.harbor_commands import (
    LOG_DIRS,
    ROOT_USERS,
    TESTS,
    VERIFIER_LOGS,
    engine_user,
    executable_target,
    removes_reward_files,
)
from regatta_executor.container.hardening import EngineRoot, engine_root, require_remapped_root
from regatta_executor.container.images import ImageBuildError, ImageCache, ResolvedImage
from regatta_executor.container.network import ensure_sandbox_network
from regatta_executor.container.options import ContainerEnvironmentOptions
from regatta_executor.container.transfers import ContainerTransfers

_MIB = 1024 * 1024
BUILD_LOG = "environment-build.log"


class ContainerEnvironment(ContainerTransfers):
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
        self._name = f"regatta-{NAME_CHARS.sub('-', self.session_id)[:80]}-{token}"
        self._container_id: str | None = None
        self._staged: files.StagedArchive | None = None
        self._snapshot: files.Snapshot | None = None
        # True from the moment the agent's processes were ended and /tests and /logs/verifier emptied
        # until the next command: the tests uploaded meanwhile are the verifier's.
        self._verifier_ready = False
        # pid 1 runs as its own uid (pid1.py): commands given no user run as the image's USER.
        self._default_exec_user = "0"
        self._download_budget = self.options.max_download_mb * _MIB
        self._downloaded = {}
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
        self._engine_root = await execs.in_thread(check, self._client)
        await execs.in_thread(janitor.sweep_once, self._client, self._owners_dir)
        self.image = await self._image(force_build)
        if self._network_is_allowlist:
            self.logger.warning(
                "network_mode 'allowlist' runs without any network in the container environment"
            )
        network = await self._network()
        self._container_id = await execs.in_thread(self._create_and_start, self.image, network)
        # Writable by any user the task names; they go in with the first upload or before the first
        # command, whichever comes first.
        self._stage().add_folders(list(LOG_DIRS), 0o777)
        await self._upload_environment_dir_after_start()

    @property
    def _owners_dir(self) -> Path:
        return self._state_dir / "owners"

    async def _network(self) -> str:
        """The network of the task's build steps and container: none, or the isolated sandbox bridge."""
        if not self._network_is_public:
            return "none"
        return await execs.in_thread(
            ensure_sandbox_network,
            self._client,
            self.options.sandbox_network,
            self.options.sandbox_bridge,
            self._state_dir,
        )

    async def _image(self, force_build: bool) -> ResolvedImage:
        cache = ImageCache(
            self._client,
            self._state_dir,
            self.options.image_cache_max_mb * _MIB if self.options.image_cache_max_mb else None,
            local_images=self.options.local_images,
            outbound=OutboundPolicy.parse(self.options.outbound_allow),
            max_image_bytes=self.options.max_image_mb * _MIB if self.options.max_image_mb else None,
        )
        reference = self.task_env_config.docker_image
        try:
            self.trial_paths.trial_dir.mkdir(parents=True, exist_ok=True)
            # Where the image came from (pulled digests, base image ids) stays with the attempt: the
            # build log is among its downloads.
            with open(self.trial_paths.trial_dir / BUILD_LOG, "a", encoding="utf-8", errors="replace") as log:
                if reference:
                    resolved = await execs.in_thread(cache.named, reference)
                    log.writelines(f"{fact}\n" for fact in resolved.facts)
                    return resolved
                network = await self._network()
                return await execs.in_thread(
                    cache.built,
                    self.environment_dir,
                    timeout_sec=self.task_env_config.build_timeout_sec,
                    network_mode=network,
                    log=log,
                    force=force_build,
                    run_id=self.options.run_id,
                )
        except ImageBuildError as exc:
            raise SandboxBuildFailedError(str(exc)) from exc

    def _create_and_start(self, resolved: ResolvedImage, network: str) -> str:
        # pid 1 runs as its own uid: commands without a user run as the image's, as Harbor expects.
        # The image holds pid 1's copies already (images.py bakes them in once per image).
        image = resolved.image_id
        self._default_exec_user = resolved.user or "0"
        memory_mb = (
            self._resource_limit_value("memory", auto_mode=ResourceMode.LIMIT)
            or self.options.default_memory_mb
        )
        cpus = self._resource_limit_value("cpu", auto_mode=ResourceMode.LIMIT) or self.options.default_cpus
        storage_mb = self._effective_storage_mb or self.options.default_storage_mb
        config, enforced = container_config(
            image=image,
            name=self._name,
            session_id=self.session_id,
            network=network,
            workdir=self.task_env_config.workdir,
            options=self.options,
            owners_dir=self._owners_dir,
            engine_root=self._engine_root,
            memory_mb=memory_mb,
            cpus=cpus,
            storage_mb=storage_mb,
            logs_mb=self._effective_storage_mb or self.options.default_logs_mb,
        )
        container = create_container(self._client, config, enforced, self.logger)
        self._container_id = container.id
        self.enforced_limits = frozenset(enforced)
        container.start()
        return str(container.id)

    @override
    async def stop(self, delete: bool) -> None:
        if self._staged is not None:
            self._staged.discard()
            self._staged = None
        self._drop_snapshot()
        await execs.in_thread(self._remove, delete)

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
        resolved = self._resolve_user(user)
        if resolved in ROOT_USERS:
            chmod = executable_target(command)
            if chmod is not None and self._staged is not None and self._staged.make_executable(chmod):
                return ExecResult(stdout="", stderr="", return_code=0)
            # Harbor removes stale reward files as the verifier starts. Emptying /logs/verifier does
            # that too, so the agent's processes are ended and the verifier's folders emptied now, in
            # the same exec, rather than by an exec of its own when the tests are uploaded. Not where
            # tests come with the image (Harbor then uploads none, and /tests must stay).
            if self._enable_environment_dir_upload and removes_reward_files(command):
                await self._prepare_verifier()
                return ExecResult(stdout="", stderr="", return_code=0)
        await self._flush()
        self._ran()
        output = await execs.run_command(
            self._client.api,
            self._running(),
            ["bash", "-c", command],
            env=self._merge_env(env) or {},
            user=engine_user(self._default_exec_user if resolved is None else resolved),
            workdir=cwd or self.task_env_config.workdir,
            timeout_sec=timeout_sec,
            max_output_bytes=self.options.max_output_mb * _MIB,
        )
        return ExecResult(stdout=output.stdout, stderr=output.stderr, return_code=output.return_code)

    @override
    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        target = files.container_path(target_dir)
        if await self.unchanged_since_download(Path(source_dir), target):
            # What Harbor read back, sent back unchanged: the container holds it already, as the agent
            # left it, which is what a verifier sees where the logs are mounted (Harbor's docker).
            return
        self._forget_downloads(target)
        if PurePosixPath(target) == TESTS and not self._verifier_ready:
            # The verifier starts now (Harbor did not announce it by removing reward files first).
            # Harbor uploads a multi-step task's tests in several calls without an exec between them;
            # only the first of those clears.
            await self._prepare_verifier()
        if not any(Path(source_dir).iterdir()):
            # Nothing to archive, but the folder must exist afterwards (`mkdir -p`: an archive entry
            # for it would reset an existing folder's owner and mode).
            await self.exec(self._ensure_dirs_command([target], chmod=False), user="root")
            return
        await execs.in_thread(self._stage().add_dir, Path(source_dir), target)

    async def _prepare_verifier(self) -> None:
        """Nothing the agent started may run alongside the verifier or touch its output, and nothing
        it left in /tests or /logs/verifier may count."""
        await self._flush()
        self._ran()
        await execs.end_other_processes(
            self._client.api,
            self._running(),
            then=self._empty_dirs_command([str(TESTS), str(VERIFIER_LOGS)], chmod=False)
            + f" && chmod 777 {VERIFIER_LOGS}",
        )
        self._verifier_ready = True

    def _ran(self) -> None:
        """Something runs in the container: what was read from it may change, and the verifier's
        folders may be written again."""
        self._drop_snapshot()
        self._verifier_ready = False
