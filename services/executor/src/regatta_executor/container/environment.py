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
until anything runs in the container; the log folders go in with the first upload. The agent's turn
ends (its processes killed, the verifier's folders emptied, the tamper digest printed) in one exec of
the platform's shell, which also does the transfer at hand: where Harbor reads the agent's logs back
after the turn (outside scoped_exec_env), it archives /logs on its output; otherwise Harbor's removal
of stale reward files starts the verifier, and the exec runs with the next operation, writing the
uploads made meanwhile (the tests) from its input. Harbor's run of the test script (as root) archives
/logs/verifier on its output once the script ends, which answers Harbor's read of it right after.

The kwargs are options.py, the container's engine configuration config.py, the file transfers
transfers.py and what the environment knows of Harbor's own commands harbor_commands.py. A task with
environment/docker-compose.yaml is read and checked by compose.py (before anything is made on the
engine) and its sidecars, network and volumes run by compose_run.py; the agent's container is then
compose's `main`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar, override

from docker.errors import APIError, DockerException, NotFound
from harbor.environments.base import ExecResult, SandboxBuildFailedError, ServiceOperationsUnsupportedError
from harbor.environments.capabilities import EnvironmentCapabilities, EnvironmentResourceCapabilities
from harbor.environments.definition import should_use_prebuilt_docker_image
from harbor.models.trial.config import ResourceMode
from harbor.utils.env import resolve_env_vars
from regatta_shared.events import AttemptImage
from regatta_shared.outbound import OutboundPolicy

from regatta_executor.attempt_image import write_image_record
from regatta_executor.capabilities import sandbox_capabilities
from regatta_executor.container import (
    allowlist,
    compose_run,
    dns,
    execs,
    file_listing,
    files,
    janitor,
    tamper,
    tools,
)
from regatta_executor.container.compose import TASK_FILE, ComposeProject, load_project
from regatta_executor.container.compose_run import ComposeRun
from regatta_executor.container.config import NAME_CHARS, container_config, create_container
from regatta_executor.container.engine import LABEL_MANAGED, LABEL_SESSION, client
from regatta_executor.container.harbor_commands import (
    AGENT_LOGS,
    LOG_DIRS,
    LOGS,
    ROOT_USERS,
    TESTS,
    VERIFIER_LOGS,
    engine_user,
    executable_target,
    removes_reward_files,
    runs_test_script,
)
from regatta_executor.container.hardening import EngineRoot, engine_root, require_remapped_root
from regatta_executor.container.images import ImageBuildError, ImageCache, ResolvedImage
from regatta_executor.container.layer_usage import NOTHING_WRITTEN, Written
from regatta_executor.container.network import (
    ensure_allowlist_network,
    ensure_sandbox_network,
    gateway_address,
)
from regatta_executor.container.options import ContainerEnvironmentOptions
from regatta_executor.container.platform import PLATFORM_SHELL, has_platform_mount
from regatta_executor.container.storage_cap import StorageCap
from regatta_executor.container.transfers import SNAPSHOT_MAX_BYTES, ContainerTransfers
from regatta_executor.sandbox_faults import VerifierCannotRunError
from regatta_executor.traits import EnvironmentTraits

_MIB = 1024 * 1024
BUILD_LOG = "environment-build.log"
# Harbor's test command ($1) as the platform's shell runs any verifier command, then, under a marker ($2)
# on the same output, /logs/verifier archived; the exec exits as the command did.
_THEN_VERIFIER_LOGS = f"""{PLATFORM_SHELL} -c "$1"
status=$?
echo "$2"
{files.archive_command(tools.BUSYBOX, str(VERIFIER_LOGS))} 2>/dev/null
exit $status
"""
# The exit code of the exec that ends the agent's turn when the uploads it carried could not be written.
_INPUT_NOT_WRITTEN = 75


class UploadNotWrittenError(RuntimeError):
    """Files uploaded into the container could not be written there (an infrastructure fault)."""


class ContainerEnvironment(ContainerTransfers):
    """One container per attempt, as Harbor's docker environment makes it (the image's ENTRYPOINT,
    USER, WORKDIR, ENV and Docker's default capabilities), with a pid 1 the agent cannot ptrace
    (pid1.py, from the read-only tools mount of tools.py), limits from task.toml, no other host
    mount and no engine socket; removed when the attempt ends (janitor.py removes the ones a killed
    executor left). `no-network` tasks get no network at all; `public` ones the isolated bridge of
    network.py; `allowlist` ones a bridge shut but for their allowed hosts (allowlist.py). A compose task's
    sidecars run beside it on a network of the attempt's own (compose_run.py)."""

    options_model = ContainerEnvironmentOptions
    options: ContainerEnvironmentOptions
    TRAITS: ClassVar[EnvironmentTraits] = EnvironmentTraits(
        builds_image=True,
        runs_on_host=False,
        runs_compose=True,
        checks_compose=True,
        takes_run_id=True,
        takes_deployment_policy=True,
    )
    # A task with environment/docker-compose.yaml: its project (checked by _validate_definition, which
    # Harbor calls before __init__'s own lines run) and, once started, its engine objects.
    _compose: ComposeProject | None = None
    _compose_run: ComposeRun | None = None

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
        # What the exec that ended the agent's turn printed (the digest's line), from the moment Harbor
        # read the agent's logs back (that exec archived them) until the next command: the verifier
        # then starts without an exec of its own (_prepare_verifier).
        self._turn_ended: str | None = None
        # Harbor started the verifier (_prepare_verifier) and the exec that ends the agent's turn has not
        # run yet: it runs before anything else touches the container (_flush).
        self._verifier_pending = False
        # Harbor runs the agent's setup and turns inside scoped_exec_env: while it is entered, any read
        # of the agent's logs is the agent's own, mid-turn.
        self._agent_scopes = 0
        # From the verifier's start on, commands start from the platform's shell (platform.py) where
        # the container has it: the agent may have replaced the image's.
        self._verifier_phase = False
        self._platform_shell = False
        self._storage_mb: int | None = None
        self._storage_cap: StorageCap | None = None
        # The host's boot time before the container's first exec: what started earlier in it is the
        # image's, never the agent's (execs.KILL_OTHERS spares it).
        self._first_exec_at: float | None = None
        # Commands given no user run as the image's USER (the container's, as under Harbor).
        self._default_exec_user = "0"
        self._download_budget = self.options.max_download_mb * _MIB
        self._downloaded = {}
        self.image: ResolvedImage | None = None
        self._engine_root = EngineRoot(remapped=False)
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
            self._compose = self._load_compose(force_build=False)
            return
        if not self.task_env_config.docker_image and not (self.environment_dir / "Dockerfile").is_file():
            raise FileNotFoundError(
                "environment/Dockerfile is missing and [environment].docker_image is not set"
            )

    def _load_compose(self, *, force_build: bool) -> ComposeProject:
        """The task's compose project merged as Harbor's docker environment merges it: its base file,
        the task's file, run-level extra files and main's env, `${VAR}` from Harbor's infrastructure
        variables over the task's env (never this process's environment)."""
        prebuilt = should_use_prebuilt_docker_image(
            self.environment_dir, docker_image=self.task_env_config.docker_image, force_build=force_build
        )
        variables = {
            **(resolve_env_vars(self.task_env_config.env) if self.task_env_config.env else {}),
            **self._persistent_env,
            "MAIN_IMAGE_NAME": f"hb__{self.environment_id}",
            "CONTEXT_DIR": str(self.environment_dir.resolve()),
        }
        if prebuilt and self.task_env_config.docker_image:
            variables["PREBUILT_IMAGE_NAME"] = self.task_env_config.docker_image
        if self._effective_cpus:
            variables["CPUS"] = str(self._effective_cpus)
        if self._effective_memory_mb:
            variables["MEMORY"] = f"{self._effective_memory_mb}M"
        return load_project(
            self.environment_dir,
            variables=variables,
            main_environment=self._startup_env(),
            extra_files=list(self.extra_docker_compose_paths),
            prebuilt=prebuilt,
        )

    @property
    def container_name(self) -> str:
        return self._name

    @override
    async def start(self, force_build: bool) -> None:
        check = engine_root if self.options.allow_host_root else require_remapped_root
        self._engine_root = await execs.in_thread(check, self._client)
        await execs.in_thread(janitor.sweep_once, self._client, self._owners_dir, compose_run.sweep)
        await execs.in_thread(tools.prepared, self._tools_dir)
        if self._compose is not None:
            if self._network_is_allowlist:
                self.logger.warning(
                    "network_mode 'allowlist' of a compose task runs on an internal network (nothing "
                    "leaves) in the container environment"
                )
            network = await self._start_compose(force_build)
        else:
            self.image = await self._image(force_build)
            network = await self._network()
        self._container_id = await execs.in_thread(self._create_and_start, self.image, network)
        self._record_image(self.image)
        await self._list_image_files()
        if self._storage_mb:
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

    async def _list_image_files(self) -> None:
        """The image's files, for the tamper check, from this container before anything of the agent's
        runs (kept per image, so once per image and executor); then, only right after the image was
        made, the wait that closes the listing's blind spot (file_listing.py)."""
        assert self.image is not None, "started"
        try:
            listing = await execs.in_thread(
                file_listing.of_image, self._client.api, self._running(), self.image.image_id
            )
        except (DockerException, file_listing.ListingError) as exc:
            # The check then asks the engine for the changes instead.
            self.logger.warning("the image's files could not be listed: %s", exc)
            return
        await asyncio.sleep(file_listing.seconds_to_wait(listing))

    def _record_image(self, image: ResolvedImage | None) -> None:
        """What the container runs, for the attempt's report (attempt_image.py)."""
        if image is None:
            return
        record = AttemptImage(
            reference=image.reference,
            image_id=image.image_id,
            registry_digest=image.registry_digest,
            source=image.source,  # type: ignore[arg-type]
        )
        write_image_record(self.trial_paths.trial_dir, record)

    @property
    def _owners_dir(self) -> Path:
        return self._state_dir / "owners"

    @property
    def _tools_dir(self) -> Path:
        # Absolute: the engine mounts it by its path.
        return (
            Path(self.options.tools_dir) if self.options.tools_dir else self._state_dir / "tools"
        ).absolute()

    async def _network(self) -> str:
        """The network of the task's container: none, the isolated sandbox bridge or the allowlist's."""
        if self._network_is_allowlist:
            await execs.in_thread(
                ensure_allowlist_network,
                self._client,
                self.options.allowlist_network,
                self.options.allowlist_bridge,
                os.environ.get("REGATTA_OUTBOUND_ALLOW"),
            )
            return self.options.allowlist_network
        return await self._build_network()

    async def _build_network(self) -> str:
        """The network of the task's build steps: the sandbox bridge unless the task has no network
        (an allowlist restricts the agent and verifier, not the task's own image, as in Harbor)."""
        if self._network_disabled:
            return "none"
        return await execs.in_thread(
            ensure_sandbox_network,
            self._client,
            self.options.sandbox_network,
            self.options.sandbox_bridge,
            self.options.sandbox_dns_upstreams,
        )

    def _image_cache(self) -> ImageCache:
        return ImageCache(
            self._client,
            self._state_dir,
            self.options.image_cache_max_mb * _MIB if self.options.image_cache_max_mb else None,
            local_images=self.options.local_images,
            outbound=OutboundPolicy.parse(self.options.outbound_allow),
            max_image_bytes=self.options.max_image_mb * _MIB if self.options.max_image_mb else None,
        )

    async def _image(
        self,
        force_build: bool,
        *,
        reference: str | None = None,
        context: Path | None = None,
        dockerfile: str = "Dockerfile",
        buildargs: dict[str, str] | None = None,
    ) -> ResolvedImage:
        cache = self._image_cache()
        reference = reference or self.task_env_config.docker_image
        try:
            self.trial_paths.trial_dir.mkdir(parents=True, exist_ok=True)
            # Where the image came from (pulled digests, base image ids) stays with the attempt: the
            # build log is among its downloads.
            with open(self.trial_paths.trial_dir / BUILD_LOG, "a", encoding="utf-8", errors="replace") as log:
                if reference and context is None:
                    resolved = await execs.in_thread(cache.named, reference)
                    log.writelines(f"{fact}\n" for fact in resolved.facts)
                    return resolved
                network = await self._build_network()
                return await execs.in_thread(
                    cache.built,
                    context or self.environment_dir,
                    timeout_sec=self.task_env_config.build_timeout_sec,
                    network_mode=network,
                    log=log,
                    force=force_build,
                    dockerfile=dockerfile,
                    buildargs=buildargs,
                    run_id=self.options.run_id,
                )
        except ImageBuildError as exc:
            raise SandboxBuildFailedError(str(exc)) from exc

    async def _start_compose(self, force_build: bool) -> str:
        """Build or pull every service's image, make the attempt's network and volumes, start the
        sidecars in dependency order and wait for what main depends on; returns main's network."""
        project = self._compose = self._load_compose(force_build=force_build)
        for note in project.notes:
            self.logger.info("%s: %s", TASK_FILE, note)
        images: dict[str, ResolvedImage] = {}
        for service in project.services.values():
            if service.builds and service.build is not None:
                images[service.name] = await self._image(
                    force_build,
                    context=service.build.context,
                    dockerfile=service.build.dockerfile,
                    buildargs=service.build.args,
                )
            else:
                assert service.image is not None  # load_project refuses a service with neither
                images[service.name] = await self._image(force_build, reference=service.image)
        self.image = images[project.main.name]
        labels = {
            LABEL_MANAGED: "1",
            **janitor.ownership_labels(self._owners_dir),
            LABEL_SESSION: NAME_CHARS.sub("-", self.session_id)[:200],
        }
        run = self._compose_run = ComposeRun(self._client, project, self._name, labels, self.logger)
        network = await execs.in_thread(
            run.create_network,
            public=self._network_is_public,
            dns_upstreams=self.options.sandbox_dns_upstreams,
        )
        await execs.in_thread(run.create_volumes)
        await execs.in_thread(run.start_sidecars, images, self._sidecar_config)
        await execs.in_thread(run.wait_for, project.main)
        return network

    def _limits(self) -> dict[str, Any]:
        return {
            "memory_mb": self._resource_limit_value("memory", auto_mode=ResourceMode.LIMIT)
            or self.options.default_memory_mb,
            "cpus": self._resource_limit_value("cpu", auto_mode=ResourceMode.LIMIT)
            or self.options.default_cpus,
            "storage_mb": self._effective_storage_mb or self.options.default_storage_mb,
            "logs_mb": self._effective_storage_mb or self.options.default_logs_mb,
        }

    def _sidecar_config(self, image: str, name: str) -> tuple[dict[str, Any], set[str]]:
        """The agent's container configuration (labels, limits, hardening) for a sidecar."""
        assert self._compose_run is not None
        return container_config(
            image=image,
            name=name,
            session_id=self.session_id,
            network=self._compose_run.network,
            workdir=None,
            # pid 1's settings are dropped for a sidecar (compose_run.PID1_KEYS), its tools mount too.
            image_entrypoint=(),
            image_workdir="",
            tools_dir=self._tools_dir,
            options=self.options,
            owners_dir=self._owners_dir,
            engine_root=self._engine_root,
            **self._limits(),
        )

    def _create_and_start(self, resolved: ResolvedImage, network: str) -> str:
        # The container runs as the image's USER: so do commands given no user, as under Harbor (uid 0
        # rather than an empty user: see harbor_commands.ROOT_USERS).
        image = resolved.image_id
        self._default_exec_user = resolved.user or "0"
        memory_mb = (
            self._resource_limit_value("memory", auto_mode=ResourceMode.LIMIT)
            or self.options.default_memory_mb
        )
        cpus = self._resource_limit_value("cpu", auto_mode=ResourceMode.LIMIT) or self.options.default_cpus
        storage_mb = self._storage_mb = self._effective_storage_mb or self.options.default_storage_mb
        main = self._compose.main if self._compose is not None else None
        config, enforced = container_config(
            image=image,
            name=self._name,
            session_id=self.session_id,
            network=network,
            workdir=self.task_env_config.workdir or (main.working_dir if main else None),
            # Compose's entrypoint for main replaces the image's, as under Compose.
            image_entrypoint=main.entrypoint if main and main.entrypoint is not None else resolved.entrypoint,
            image_workdir=resolved.workdir,
            tools_dir=self._tools_dir,
            options=self.options,
            owners_dir=self._owners_dir,
            engine_root=self._engine_root,
            memory_mb=memory_mb,
            cpus=cpus,
            storage_mb=storage_mb,
            logs_mb=self._effective_storage_mb or self.options.default_logs_mb,
        )
        if main is not None and self._compose_run is not None:
            # Compose's main: its environment, its user for commands given none, its named volumes,
            # and its name on the attempt's network.
            self._default_exec_user = main.user or self._default_exec_user
            if main.user:
                config["user"] = main.user  # the container's user, as Compose sets it
            config["environment"] = {**(config.get("environment") or {}), **main.environment}
            config["mounts"] = [*config["mounts"], *self._compose_run.mounts(main)]
            self._compose_run.attach(config, main)
        container = create_container(self._client, config, enforced, self.logger)
        self._container_id = container.id
        self.enforced_limits = frozenset(enforced)
        # From the inspect made at create: mounts never change afterwards.
        self._platform_shell = has_platform_mount(container.attrs)
        container.start()
        return str(container.id)

    def _open_allowlist(self, network: str) -> allowlist.AttemptState:
        """The container's allowed hosts, opened before anything but its pid 1 runs in it."""
        attrs = self._client.api.inspect_container(self._container_id)
        address = (
            ((attrs.get("NetworkSettings") or {}).get("Networks") or {}).get(network, {}).get("IPAddress")
        )
        try:
            upstreams = dns.parse_upstreams(self.options.sandbox_dns_upstreams) or dns.host_upstreams()
            return allowlist.open_attempt(
                bridge=self.options.allowlist_bridge,
                gateway=gateway_address(self._client, network),
                container=self._name,
                address=str(address or ""),
                allowed_hosts=list(self.network_policy.allowed_hosts),
                upstreams=upstreams,
            )
        except (ValueError, dns.ForwarderError) as exc:
            raise allowlist.AllowlistError(f"cannot open the allowlist: {exc}") from exc

    @override
    async def stop(self, delete: bool) -> None:
        if self._storage_cap is not None:
            await self._storage_cap.stop()
        if self._staged is not None:
            self._staged.discard()
            self._staged = None
        self._drop_snapshot()
        try:
            await execs.in_thread(self._remove, delete)
        finally:
            if self._allowlist is not None:
                await execs.in_thread(allowlist.close_attempt, self._allowlist)
                self._allowlist = None
            if self._compose_run is not None:
                await execs.in_thread(self._compose_run.stop, delete)

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
            if removes_reward_files(command):
                if self._enable_environment_dir_upload:
                    await self._prepare_verifier()
                    return ExecResult(stdout="", stderr="", return_code=0)
                await self._check_sandbox()
        if self._storage_cap is not None:
            self._storage_cap.raise_if_exceeded()
        await self._flush()
        self._ran()
        self._before_exec()
        shell = PLATFORM_SHELL if self._verifier_phase and self._platform_shell else "bash"
        argv = [shell, "-c", command]
        user_ = self._default_exec_user if resolved is None else resolved
        logs = None
        if shell == PLATFORM_SHELL and user_ in ROOT_USERS and runs_test_script(command):
            # Harbor reads /logs/verifier back next: the same exec archives it once the test ends.
            marker = f"regatta-verifier-logs-{secrets.token_hex(16)}"
            logs = files.MarkedSnapshotStream(
                str(VERIFIER_LOGS), min(self._download_budget, SNAPSHOT_MAX_BYTES), marker
            )
            argv = tools.platform_shell(_THEN_VERIFIER_LOGS, command, marker)
        with (
            self._storage_cap.command() if self._storage_cap is not None else contextlib.nullcontext(),
            self._cap_is_the_reason(),
        ):
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
                stdout_sink=logs,
            )
        if self._storage_cap is not None:
            self._storage_cap.raise_if_exceeded()  # the cap killed the container under the command
        stdout = output.stdout
        if logs is not None:
            stdout += logs.rest().decode("utf-8", "replace")
            snapshot = await execs.in_thread(logs.snapshot)
            if snapshot is not None:
                # Nothing ran since the test ended: the archive answers Harbor's read, as the engine's would.
                self._download_budget -= logs.size
                self._snapshot = snapshot
        return ExecResult(stdout=stdout, stderr=output.stderr, return_code=output.return_code)

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
        """A command in a compose sidecar, as Harbor's docker environment runs one: `sh -c` (sidecar
        images often lack bash), without main's working folder, user or persistent env."""
        if self.is_main_service(service):
            return await self.exec(command, cwd=cwd, env=env, timeout_sec=timeout_sec, user=user)
        output = await execs.run_command(
            self._client.api,
            self._sidecar(service),
            ["sh", "-c", command],
            env=env or {},
            user=engine_user(user),
            workdir=cwd,
            timeout_sec=timeout_sec,
            max_output_bytes=self.options.max_output_mb * _MIB,
        )
        return ExecResult(stdout=output.stdout, stderr=output.stderr, return_code=output.return_code)

    @override
    async def stop_service(self, service: str) -> None:
        """Stop one service (main too: Harbor stops it before collecting a sidecar's evidence)."""
        ident = self._running() if self.is_main_service(service) else self._sidecar(service)
        await execs.in_thread(self._client.api.stop, ident, timeout=10)

    @override
    async def service_download_file(
        self, source_path: str, target_path: Path | str, *, service: str | None = None
    ) -> None:
        if self.is_main_service(service):
            await self.download_file(source_path, target_path)
            return
        await self._sidecar_download(files.download_file, source_path, target_path, service)

    @override
    async def service_download_dir(
        self, source_dir: str, target_dir: Path | str, *, service: str | None = None
    ) -> None:
        if self.is_main_service(service):
            await self.download_dir(source_dir, target_dir)
            return
        await self._sidecar_download(files.download_dir, source_dir, target_dir, service)

    async def _sidecar_download(
        self, fetch: Callable[..., int], source: str, target: Path | str, service: str | None
    ) -> None:
        """A sidecar's file or folder (Harbor's sidecar artifacts), through the same checked archive
        extraction and out of the same download budget as main's."""
        size = await execs.in_thread(
            fetch,
            self._client.api,
            self._sidecar(service),
            files.container_path(source),
            Path(target),
            self._download_budget,
        )
        self._download_budget -= size

    def _sidecar(self, service: str | None) -> str:
        run = self._compose_run
        if run is None or service not in run.containers:
            raise ServiceOperationsUnsupportedError(f"the attempt has no running compose service {service!r}")
        return run.containers[service]

    @override
    async def download_dir(self, source_dir: Path | str, target_dir: Path | str) -> None:
        if self._turn_is_over(files.container_path(str(source_dir))):
            await self._end_agent_turn()
        await super().download_dir(str(source_dir), target_dir)

    def _turn_is_over(self, path: str) -> bool:
        """Harbor reads the agent's log folder back, outside any agent code, only once the agent's turn
        is over (and the verifier or the container's removal comes next): the moment to end it."""
        return (
            path == AGENT_LOGS
            and self._agent_scopes == 0
            and self._turn_ended is None
            and not self._verifier_pending
            and not self._verifier_phase
            and self._enable_environment_dir_upload
            and self._container_id is not None
            and self.image is not None
            and self._snapshot is None
        )

    async def _end_agent_turn(self) -> None:
        """End the agent's processes, empty the verifier's folders and print the digest as
        `_prepare_verifier` does, and archive /logs in the same exec: Harbor's read of the agent's logs
        is then answered from that archive, and the verifier's start needs no exec of its own. If that
        exec fails, nothing is decided here: the logs are read the engine's way, and the verifier's
        start ends the turn again (and reports what fails)."""
        await self._flush()
        self._ran()
        self._before_exec()
        digest = self._digest_command()
        stream = files.SnapshotStream(
            LOGS, min(self._download_budget, SNAPSHOT_MAX_BYTES), line=digest is not None
        )
        then = f"{self._verifier_folders_command(digest)} && {files.archive_command(tools.BUSYBOX, LOGS)}"
        try:
            await execs.end_other_processes(
                self._client.api,
                self._running(),
                then=then,
                spare_started_before=self._first_exec_at or 0.0,
                on_stdout=stream,
            )
        except (RuntimeError, DockerException) as exc:
            stream.discard()
            self.logger.debug("the agent's turn could not be ended with its logs read: %s", exc)
            return
        snapshot = await execs.in_thread(stream.snapshot)
        self._turn_ended = stream.line
        if snapshot is not None:
            self._download_budget -= stream.size
            self._snapshot = snapshot

    def _image_listing(self) -> file_listing.Listing | None:
        return file_listing.known(self.image.image_id) if self.image is not None else None

    def _digest_command(self) -> str | None:
        """What prints the container's tamper digest once the agent's processes are gone (None without
        the image's listing: the tamper check then reads in full)."""
        listing = self._image_listing()
        return file_listing.digest_command(listing) if listing is not None else None

    def _verifier_folders_command(self, digest: str | None) -> str:
        """Empty /tests and /logs/verifier (writable by any user), then print the digest if any."""
        command = (
            self._empty_dirs_command([str(TESTS), str(VERIFIER_LOGS)], chmod=False)
            + f" && chmod 777 {VERIFIER_LOGS}"
        )
        return f"{command} && {digest}" if digest is not None else command

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
        """Harbor starts the verifier. Nothing the agent started may run alongside it or touch its
        output, and nothing it left in /tests or /logs/verifier may count. Unless the agent's turn was
        ended already (when Harbor read its logs), the exec that ends it runs with the next operation
        on the container, carrying what Harbor uploads meanwhile (the tests) as its input (_flush):
        until then nothing runs in the container and nothing is read from it."""
        if self._turn_ended is None:
            self._verifier_pending = True
            self._verifier_ready = True
            return
        # Ended when Harbor read the agent's logs, and nothing ran since (an upload runs nothing).
        printed, self._turn_ended = self._turn_ended, None
        await self._flush()
        await self._sandbox_checked(printed)

    @override
    async def _flush(self) -> None:
        if self._verifier_pending:
            self._verifier_pending = False
            await self._end_turn_for_verifier()
            if self._agent_scopes:
                # The operation is the agent's (a later step began before the verifier ran anything).
                self._agent_turn_begins()
        await super()._flush()

    async def _end_turn_for_verifier(self) -> None:
        """The exec that ends the agent's turn (`_verifier_folders_command` after the kill, with the
        digest), then writes the uploads staged since the verifier started, from its input, after
        emptying the folders they go to: one exec where an upload and an exec would be two."""
        then = self._verifier_folders_command(self._digest_command())
        staged, data, written = self._staged, None, NOTHING_WRITTEN
        if staged is not None and staged and execs.sends_input(self._client.api):
            self._staged, data, written = None, staged.take(), staged.written
            # As root, over what is there, owned by root (as the engine's upload makes them); a failure
            # exits with a code of its own, to be told from the kill's.
            then += f" && {{ {tools.BUSYBOX} tar -xo -C / -f - || exit {_INPUT_NOT_WRITTEN}; }}"
        if self._storage_cap is not None:
            # The files written here are the verifier's: they must not count against the agent's
            # cap, or get the container killed by its watch (the check after the exec allows them).
            await self._storage_cap.stop()
        self._ran()
        self._before_exec()
        try:
            printed = await execs.end_other_processes(
                self._client.api,
                self._running(),
                then=then,
                spare_started_before=self._first_exec_at or 0.0,
                stdin=data,
            )
        except execs.PlatformCommandError as exc:
            if data is not None and exc.code == _INPUT_NOT_WRITTEN:
                # The platform's upload failed, as when the engine refuses one: not the agent's fault.
                raise UploadNotWrittenError(
                    f"the files uploaded for the verifier could not be written into the container: {exc}"
                ) from exc
            # The command ran in the sandbox and failed there (say, the agent deleted its shell): the
            # sandbox's state, so the agent's failure. The tamper check names the files if it can.
            await self._check_sandbox()
            raise VerifierCannotRunError(str(exc)) from exc
        finally:
            if data is not None:
                data.close()
        await self._sandbox_checked(printed, written)

    async def _sandbox_checked(self, printed: str, written: Written = NOTHING_WRITTEN) -> None:
        """The checks of the agent's turn, given what the exec that ended it printed (the digest that
        shows nothing protected changed spares the tamper check its full listing: file_listing.py)
        and what of the verifier's files it wrote."""
        listing = self._image_listing()
        await self._check_sandbox(
            image_unchanged=listing is not None and file_listing.unchanged(listing, printed),
            written=written,
        )
        self._verifier_ready = True

    async def _check_sandbox(self, image_unchanged: bool = False, written: Written = NOTHING_WRITTEN) -> None:
        """The agent phase is over: the writable layer within its cap and the image's executables
        and libraries as the image has them (tamper.py, unless `image_unchanged` says so already),
        else the attempt is the agent's failure."""
        if self._storage_cap is not None:
            await self._storage_cap.stop()
            await self._storage_cap.check(allowance=written)
        assert self.image is not None, "started"
        api, container = self._client.api, self._running()
        labels = {LABEL_MANAGED: "1", **janitor.ownership_labels(self._owners_dir)}
        if not image_unchanged:
            await execs.in_thread(tamper.check, api, container, self.image.image_id, labels)
        self._verifier_phase = True

    @override
    @contextlib.contextmanager
    def scoped_exec_env(self, env: dict[str, str]) -> Iterator[None]:
        # Harbor wraps the agent's setup and run in this alone: the agent's turn (again, in a later
        # step of a multi-step task), so its commands run in the image's bash and its writes are
        # measured until the next verifier. (A verifier start still pending is resolved first, by the
        # turn's first operation: _flush.)
        if self._verifier_phase:
            self._agent_turn_begins()
        self._agent_scopes += 1
        try:
            with super().scoped_exec_env(env):
                yield
        finally:
            self._agent_scopes -= 1

    def _agent_turn_begins(self) -> None:
        self._verifier_phase = False
        if self._storage_cap is not None and not self._storage_cap.exceeded:
            self._storage_cap.start()

    @contextlib.contextmanager
    def _cap_is_the_reason(self) -> Iterator[None]:
        """An engine error from a container the storage cap killed meanwhile (the exec's create or start
        answering 409 "not running") is the cap's failure, not an infrastructure fault."""
        try:
            yield
        except DockerException as exc:
            if self._storage_cap is not None and self._storage_cap.exceeded:
                raise self._storage_cap.error() from exc
            raise

    def _running(self) -> str:
        # A container the storage cap killed fails whatever touches it next with the cap's reason.
        if self._storage_cap is not None:
            self._storage_cap.raise_if_exceeded()
        return super()._running()

    def _before_exec(self) -> None:
        if self._first_exec_at is None:
            self._first_exec_at = execs.boot_time()

    def _ran(self) -> None:
        """Something runs in the container: what was read from it may change, and the verifier's
        folders may be written again."""
        self._drop_snapshot()
        self._verifier_ready = False
        self._turn_ended = None
