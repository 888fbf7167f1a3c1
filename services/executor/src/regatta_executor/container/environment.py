"""Regatta's `container` Harbor environment: one long-lived container per attempt on a Docker engine.

Reach it from Harbor with::

    environment={"import_path": "regatta_executor.container.environment:ContainerEnvironment",
                 "delete": True, "kwargs": {...ContainerEnvironmentOptions fields...}}

This class is Harbor's `BaseEnvironment` interface and the attempt's state; the work is its collaborators':
provisioning.py (the engine, the task's image from image/, its network from network/, the container and
its allowlist), compose/attempt.py (a task's docker-compose.yaml: its sidecars), exec/ (commands with the
user, folder, environment and timeout Harbor asks for), files/transfers.py (files in and out through the
engine's archive API, as few round trips as Harbor's calls allow: nothing of the host is mounted),
verifier_turn.py (whose turn it is: how the agent's ends and a shared verifier starts, under the run's
verifier-integrity policy, with turn_end.py) and test_script.py (Harbor's run of the tests). In Harbor's
`separate` verifier mode Harbor makes a second environment of this class for the verifier: only a fresh
container.
"""

from __future__ import annotations

import contextlib
import secrets
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar, override

from harbor.environments.base import ExecResult, ServiceOperationsUnsupportedError
from harbor.environments.capabilities import EnvironmentCapabilities, EnvironmentResourceCapabilities
from harbor.models.trial.config import ResourceMode
from regatta_shared.rules.environment_traits import CONTAINER, EnvironmentTraits

from regatta_executor.attempt.integrity_record import IntegrityLog
from regatta_executor.container import live_logs
from regatta_executor.container.compose import sidecars
from regatta_executor.container.compose.attempt import ComposeServices, load_compose
from regatta_executor.container.compose.model import TASK_FILE, ComposeProject
from regatta_executor.container.config import NAME_CHARS
from regatta_executor.container.engine import client
from regatta_executor.container.exec import commands as execs
from regatta_executor.container.exec.harbor_commands import (
    AGENT_LOGS,
    LOG_DIRS,
    ROOT_USERS,
    SEPARATE_VERIFIER_SESSION,
    VERIFIER_LOGS,
    engine_user,
    executable_target,
    has_shared_verifier,
)
from regatta_executor.container.files import archive as files
from regatta_executor.container.files import snapshots
from regatta_executor.container.files.storage_cap import StorageCap
from regatta_executor.container.files.transfers import ContainerTransfers
from regatta_executor.container.image.resolved import ResolvedImage
from regatta_executor.container.network import allowlist
from regatta_executor.container.options import ContainerEnvironmentOptions
from regatta_executor.container.provisioning import MIB, Provisioning, record_image
from regatta_executor.container.verifier_turn import VerifierTurn
from regatta_executor.environments.capabilities import sandbox_capabilities

_MIB = MIB


class ContainerEnvironment(ContainerTransfers):
    """One container per attempt, as Harbor's docker environment makes it (the image's ENTRYPOINT,
    USER, WORKDIR, ENV and Docker's default capabilities), with a pid 1 the agent cannot ptrace
    (pid1.py, from the read-only tools mount of tools.py), limits from task.toml, no other host
    mount and no engine socket; removed when the attempt ends (janitor.py removes the ones a killed
    executor left). `no-network` tasks get no network at all; `public` ones the isolated bridge of
    network.py; `allowlist` ones a bridge shut but for their allowed hosts (allowlist.py). A compose task's
    sidecars run beside it on a network of the attempt's own (compose/sidecars.py)."""

    options_model = ContainerEnvironmentOptions
    options: ContainerEnvironmentOptions
    TRAITS: ClassVar[EnvironmentTraits] = CONTAINER
    # A task with environment/docker-compose.yaml: its project (checked by _validate_definition, which
    # Harbor calls before __init__'s own lines run) and, once started, its engine objects.
    _compose: ComposeProject | None = None
    _services: ComposeServices | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._client = client()
        self._state_dir = Path(self.options.state_dir or Path(tempfile.gettempdir(), "regatta-containers"))
        self._provisioning = Provisioning(
            self._client, self.options, self._state_dir, self.session_id, self.logger
        )
        token = secrets.token_hex(4)
        self._name = f"regatta-{NAME_CHARS.sub('-', self.session_id)[:80]}-{token}"
        self._container_id: str | None = None
        self._staged: files.StagedArchive | None = None
        self._snapshot: snapshots.Snapshot | None = None
        self._storage_mb: int | None = None
        self._storage_cap: StorageCap | None = None
        for_verifier = SEPARATE_VERIFIER_SESSION in self.session_id
        mode = "separate" if for_verifier else "shared"
        self._integrity = IntegrityLog(self.trial_paths.trial_dir, self.options.verifier_integrity, mode)
        self._turn = VerifierTurn(
            self,
            self._integrity,
            owners_dir=self._provisioning.owners_dir,
            enforced=self.options.verifier_integrity == "enforce",
            for_verifier=for_verifier,
            shared_verifier=not for_verifier and has_shared_verifier(self.environment_dir),
        )
        # Commands given no user run as the image's USER (the container's, as under Harbor).
        self._default_exec_user = "0"
        self._download_budget = self.options.max_download_mb * _MIB
        self._downloaded = {}
        self.image: ResolvedImage | None = None
        self._allowlist: allowlist.AttemptState | None = None
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
        if (self.environment_dir / TASK_FILE).exists():
            # Refused here (a ComposeError is a ValueError), before anything is made on the engine.
            self._compose = load_compose(self, force_build=False)
            return
        if not self.task_env_config.docker_image and not (self.environment_dir / "Dockerfile").is_file():
            raise FileNotFoundError(
                "environment/Dockerfile is missing and [environment].docker_image is not set"
            )

    @property
    def container_name(self) -> str:
        return self._name

    def live_folder(self) -> str | None:
        """The log folder the live view may read now (live_logs.py; whose it is: verifier_turn.py)."""
        return None if self._container_id is None else self._turn.live_folder()

    async def read_live_folder(self, kind: str) -> dict[str, bytes] | None:
        container = self._container_id
        if container is None or self.live_folder() != kind:
            return None
        folder = AGENT_LOGS if kind == "agent" else str(VERIFIER_LOGS)
        return await execs.in_thread(live_logs.read_files, self._client.api, container, folder)

    @override
    async def start(self, force_build: bool) -> None:
        await self._provisioning.prepare_engine(sidecars.sweep)
        if self._compose is not None:
            if self._network_is_allowlist:
                self.logger.warning(
                    "network_mode 'allowlist' of a compose task runs on an internal network (nothing "
                    "leaves) in the container environment"
                )
            network = await self._start_compose(force_build)
        else:
            self.image = await self._image(force_build)
            network = await self._provisioning.network(
                allowlisted=self._network_is_allowlist, disabled=self._network_disabled
            )
        self._container_id = await execs.in_thread(self._create_and_start, self.image, network)
        if self._turn.for_verifier:
            self._turn.note_own_container()
        else:
            record_image(self.trial_paths.trial_dir, self.image)
        if self._turn.shared_verifier:
            assert self.image is not None, "started"
            await self._provisioning.list_image_files(self._running(), self.image)
        if self._storage_mb and not self._turn.for_verifier:
            # An engine's quota holds bytes only: the entries are measured wherever it has one.
            enforced = "storage" in self.enforced_limits
            self._storage_cap = StorageCap(
                self._client.api, self._container_id, self._storage_mb, bytes_enforced=enforced
            )
            self._storage_cap.start()
        if self._network_is_allowlist and self._compose is None:
            self._allowlist = await execs.in_thread(self._open_allowlist, network)
        # Writable by any user the task names; they go in with the first upload or before the first
        # command, whichever comes first.
        self._stage().add_folders(list(LOG_DIRS), 0o777)
        await self._upload_environment_dir_after_start()

    async def _image(self, force_build: bool, **source: Any) -> ResolvedImage:
        """The task's image, or a compose service's (`source`: reference, or context, dockerfile and
        build args)."""
        return await self._provisioning.image(
            force_build,
            task=self.task_env_config,
            trial_dir=self.trial_paths.trial_dir,
            environment_dir=self.environment_dir,
            network_disabled=self._network_disabled,
            **source,
        )

    async def _start_compose(self, force_build: bool) -> str:
        """Every service's image, the attempt's network and volumes, the sidecars started and waited
        for (compose/attempt.py); returns main's network."""
        project = self._compose = load_compose(self, force_build=force_build)
        for note in project.notes:
            self.logger.info("%s: %s", TASK_FILE, note)
        max_output = self.options.max_output_mb * _MIB
        services = self._services = ComposeServices(project, self._client.api, max_output_bytes=max_output)
        self.image, network = await services.start(
            self._client,
            self._name,
            self._provisioning.labels(),
            self.logger,
            self._image,
            self._provisioning.config,
            self._limits(),
            force_build=force_build,
            public=self._network_is_public,
            dns_upstreams=self.options.sandbox_dns_upstreams,
        )
        return network

    def _limits(self) -> dict[str, Any]:
        memory = self._resource_limit_value("memory", auto_mode=ResourceMode.LIMIT)
        cpus = self._resource_limit_value("cpu", auto_mode=ResourceMode.LIMIT)
        return self._provisioning.limits(memory_mb=memory, cpus=cpus, storage_mb=self._effective_storage_mb)

    def _create_and_start(self, resolved: ResolvedImage, network: str) -> str:
        limits = self._limits()
        self._storage_mb = limits["storage_mb"]
        main = self._compose.main if self._compose is not None else None
        made = self._provisioning.create_and_start(
            resolved,
            self._name,
            network,
            workdir=self.task_env_config.workdir or (main.working_dir if main else None),
            main=main,
            services=self._services,
            limits=limits,
            on_created=self._created,
        )
        self.enforced_limits = made.enforced
        self._default_exec_user = made.default_user
        # From the inspect made at create: mounts never change afterwards.
        self._turn.platform_shell = made.platform_shell
        return made.container_id

    def _created(self, container_id: str) -> None:
        # Known before it starts: a stop removes it whatever happens next.
        self._container_id = container_id

    def _restart_allowlist(self) -> None:
        """A restarted container may get another address on its network: its allowlist follows it."""
        state = self._allowlist
        network = self.options.allowlist_network
        if state is None or self._provisioning.address(self._running(), network) == state.address:
            return
        allowlist.close_attempt(state)
        self._allowlist = None
        self._allowlist = self._open_allowlist(network)

    def _open_allowlist(self, network: str) -> allowlist.AttemptState:
        allowed = list(self.network_policy.allowed_hosts)
        return self._provisioning.open_allowlist(self._running(), self._name, network, allowed)

    @override
    async def stop(self, delete: bool) -> None:
        if self._storage_cap is not None:
            await self._storage_cap.stop()
        self._discard_transfers()
        try:
            await execs.in_thread(self._provisioning.remove, self._container_id, self._name, delete)
        finally:
            if self._allowlist is not None:
                await execs.in_thread(allowlist.close_attempt, self._allowlist)
                self._allowlist = None
            if self._services is not None:
                await self._services.stop(delete)

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
            if await self._turn.starts_verifier(command):
                return ExecResult(stdout="", stderr="", return_code=0)
        if self._storage_cap is not None:
            self._storage_cap.raise_if_exceeded()
        await self._flush()
        self._turn.ran()
        self._turn.before_exec()
        user_ = self._default_exec_user if resolved is None else resolved
        argv, test_run = self._turn.command(command, user_)
        with self._storage_cap.command() if self._storage_cap is not None else contextlib.nullcontext():
            output = await execs.run_command(
                self._client.api,
                self._running(),
                argv,
                env=self._merge_env(env) or {},
                user=engine_user(user_),
                workdir=cwd or self.task_env_config.workdir,
                timeout_sec=timeout_sec,
                max_output_bytes=self.options.max_output_mb * _MIB,
                # Set only while a trial streams a phase's output (the live view: trials.py).
                on_output=self._output_callback(),
                stdout_sink=test_run.logs if test_run is not None else None,
            )
        if self._storage_cap is not None:
            self._storage_cap.raise_if_exceeded()  # the cap killed the container under the command
        if test_run is not None:
            return await self._turn.tests_ran(test_run, output)
        return ExecResult(stdout=output.stdout, stderr=output.stderr, return_code=output.return_code)

    @override
    @contextlib.contextmanager
    def scoped_exec_env(self, env: dict[str, str]) -> Iterator[None]:
        with self._turn.agent_scope(), super().scoped_exec_env(env):
            yield

    @override
    def _running(self) -> str:
        # A container the storage cap killed fails whatever touches it next with the cap's reason.
        if self._storage_cap is not None:
            self._storage_cap.raise_if_exceeded()
        return super()._running()

    @override
    async def service_exec(
        self,
        command: str,
        *,
        service: str | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> ExecResult:
        """A command in a compose sidecar (compose/attempt.py), or in main."""
        if self.is_main_service(service):
            return await self.exec(command, cwd=cwd, env=env, timeout_sec=timeout_sec, user=user)
        services = self._compose_services()
        return await services.exec(service, command, cwd=cwd, env=env, timeout_sec=timeout_sec, user=user)

    @override
    async def stop_service(self, service: str) -> None:
        """Stop one service (main too: Harbor stops it before collecting a sidecar's evidence)."""
        ident = (
            self._running() if self.is_main_service(service) else self._compose_services().sidecar(service)
        )
        await execs.in_thread(self._client.api.stop, ident, timeout=10)

    @override
    async def service_download_file(
        self, source_path: str, target_path: Path | str, *, service: str | None = None
    ) -> None:
        if self.is_main_service(service):
            return await self.download_file(source_path, target_path)
        await self._sidecar_download(files.download_file, source_path, target_path, service)

    @override
    async def service_download_dir(
        self, source_dir: str, target_dir: Path | str, *, service: str | None = None
    ) -> None:
        if self.is_main_service(service):
            return await self.download_dir(source_dir, target_dir)
        await self._sidecar_download(files.download_dir, source_dir, target_dir, service)

    async def _sidecar_download(
        self, fetch: Callable[..., int], source: str, target: Path | str, service: str | None
    ) -> None:
        """Out of the same download budget as main's."""
        services, budget = self._compose_services(), self._download_budget
        self._download_budget -= await services.download(fetch, source, target, service, budget)

    def _compose_services(self) -> ComposeServices:
        if self._services is None:
            raise ServiceOperationsUnsupportedError("the attempt runs no compose services")
        return self._services
