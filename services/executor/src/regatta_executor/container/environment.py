"""Regatta's `container` Harbor environment: one long-lived container per attempt on a Docker engine.

Reach it from Harbor with::

    environment={"import_path": "regatta_executor.container.environment:ContainerEnvironment",
                 "delete": True, "kwargs": {...ContainerEnvironmentOptions fields...}}

The image is the task's `[environment].docker_image` (pulled when missing) or built from its
`environment/` folder, once per content digest (images.py). Nothing of the host is mounted: files go
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
"""

from __future__ import annotations

import posixpath
import re
import secrets
import shlex
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any, override

from docker.errors import APIError, DockerException, NotFound
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
LOGS = "/logs"
AGENT_LOGS = "/logs/agent"
VERIFIER_LOGS = PurePosixPath("/logs/verifier")
LOG_DIRS = ("/logs/agent", "/logs/verifier", "/logs/artifacts")
BUILD_LOG = "environment-build.log"
# Users Harbor means as root. The engine is always given uid 0 instead of the name: a name makes the
# engine read the image's /etc/passwd from its own view of the container's files, which can be lost
# while the container runs (see `_check_engine_view`), and then no exec as "root" starts at all.
_ROOT_USERS = ("root", "0", 0)
# A folder read back to answer several reads is not worth more than this; past it, each read goes alone.
_SNAPSHOT_MAX_BYTES = 64 * _MIB
# A folder every container has (the engine makes it) and no process in it can remove (it is a mount point
# there): if the engine cannot see it, it has lost its view of the container's files.
_ALWAYS_THERE = "/proc"
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
        self._staged: files.StagedArchive | None = None
        self._snapshot: files.Snapshot | None = None
        # True from the moment the agent's processes were ended and /tests and /logs/verifier emptied
        # until the next command: the tests uploaded meanwhile are the verifier's.
        self._verifier_ready = False
        # pid 1 runs as its own uid (pid1.py): commands given no user run as the image's USER.
        self._default_exec_user = "0"
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
        self._engine_root = await execs.in_thread(check, self._client)
        await execs.in_thread(janitor.sweep_once, self._client, self._owners_dir)
        self.image = await self._image(force_build)
        network = "none"
        if self._network_is_public:
            network = await execs.in_thread(
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
        self._container_id = await execs.in_thread(self._create_and_start, self.image.reference, network)
        # Writable by any user the task names; they go in with the first upload or before the first
        # command, whichever comes first.
        self._stage().add_folders(list(LOG_DIRS), 0o777)
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
                return await execs.in_thread(cache.named, reference)
            self.trial_paths.trial_dir.mkdir(parents=True, exist_ok=True)
            network = "none" if not self._network_is_public else self.options.sandbox_network
            if network != "none":
                await execs.in_thread(
                    ensure_sandbox_network,
                    self._client,
                    self.options.sandbox_network,
                    self.options.sandbox_bridge,
                    self._state_dir,
                )
            with open(self.trial_paths.trial_dir / BUILD_LOG, "a", encoding="utf-8", errors="replace") as log:
                return await execs.in_thread(
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
            # The engine makes the task's WORKDIR (root-owned) when it creates the container.
            **({"working_dir": self.task_env_config.workdir} if self.task_env_config.workdir else {}),
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
        if resolved in _ROOT_USERS:
            chmod = _executable_target(command)
            if chmod is not None and self._staged is not None and self._staged.make_executable(chmod):
                return ExecResult(stdout="", stderr="", return_code=0)
            # Harbor removes stale reward files as the verifier starts. Emptying /logs/verifier does
            # that too, so the agent's processes are ended and the verifier's folders emptied now, in
            # the same exec, rather than by an exec of its own when the tests are uploaded. Not where
            # tests come with the image (Harbor then uploads none, and /tests must stay).
            if self._enable_environment_dir_upload and _removes_reward_files(command):
                await self._prepare_verifier()
                return ExecResult(stdout="", stderr="", return_code=0)
        await self._flush()
        self._ran()
        output = await execs.run_command(
            self._client.api,
            self._running(),
            ["bash", "-c", command],
            env=self._merge_env(env) or {},
            user=_engine_user(self._default_exec_user if resolved is None else resolved),
            workdir=cwd or self.task_env_config.workdir,
            timeout_sec=timeout_sec,
            max_output_bytes=self.options.max_output_mb * _MIB,
        )
        return ExecResult(stdout=output.stdout, stderr=output.stderr, return_code=output.return_code)

    @override
    async def is_dir(self, path: str, user: str | int | None = None) -> bool:
        # As root (what Harbor asks), `test -d` sees what the engine's archive of the folder shows.
        if self._resolve_user(user) in _ROOT_USERS:
            snapshot = await self._snapshot_for(files.container_path(path), root=files.container_path(path))
            if snapshot is not None:
                member = snapshot.member(path)
                if member is not None and not member.issym() and not snapshot.through_link(path):
                    return member.isdir()
        return await super().is_dir(path, user)

    @override
    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        await execs.in_thread(self._stage().add_file, Path(source_path), files.container_path(target_path))

    @override
    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        target = files.container_path(target_dir)
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

    def _stage(self) -> files.StagedArchive:
        if self._staged is None:
            self._staged = files.StagedArchive()
        return self._staged

    async def _flush(self) -> None:
        """Send the staged uploads (before anything that could see them)."""
        staged, self._staged = self._staged, None
        if staged is None:
            return
        if not staged:
            staged.discard()
            return
        buffer = staged.take()
        try:
            await execs.in_thread(self._client.api.put_archive, self._running(), "/", buffer)
        finally:
            buffer.close()
        # Written where the engine sees the container's files, which must be the container's own.
        await self._check_engine_view()
        snapshot = self._snapshot
        if snapshot is not None:
            # The archive of a folder still answers for its parts no upload went into, if the uploads
            # could not reach past their own folders (no symlink on the way or inside).
            if all(snapshot.covers(target) and snapshot.is_plain_tree(target) for target in staged.targets):
                snapshot.stale.extend(staged.targets)
            else:
                self._drop_snapshot()

    def _ran(self) -> None:
        """Something runs in the container: what was read from it may change, and the verifier's
        folders may be written again."""
        self._drop_snapshot()
        self._verifier_ready = False

    def _drop_snapshot(self) -> None:
        if self._snapshot is not None:
            self._snapshot.close()
            self._snapshot = None

    async def _snapshot_for(self, path: str, root: str | None) -> files.Snapshot | None:
        """An archive that answers for `path`: the one already read if nothing ran since, else one of
        `root` read now (None: when `root` is None, or the archive cannot answer)."""
        await self._flush()
        if self._snapshot is not None and self._snapshot.covers(path):
            return self._snapshot
        if root is None:
            return None
        self._drop_snapshot()
        limit = min(self._download_budget, _SNAPSHOT_MAX_BYTES)
        try:
            snapshot, size = await execs.in_thread(
                files.fetch_snapshot, self._client.api, self._running(), root, limit
            )
        except NotFound:
            await self._check_engine_view()
            return None
        except files.DownloadTooLargeError:
            return None
        self._download_budget -= size
        if not snapshot.usable or not snapshot.covers(path):
            snapshot.close()
            return None
        self._snapshot = snapshot
        return snapshot

    async def _check_engine_view(self) -> None:
        """The engine reads and writes a running container's files through its own mount of them on
        the host. If that mount is gone (unmounted on the host by something else while the container
        runs), the archive API silently works on an empty folder instead and execs by user name fail:
        the attempt cannot go on, and must not be scored."""
        try:
            response = await execs.in_thread(
                self._client.api.head,
                self._client.api._url("/containers/{0}/archive", self._running()),
                params={"path": _ALWAYS_THERE},
            )
        except (DockerException, OSError):
            return
        if response.status_code == 404:
            raise EngineViewLostError(
                f"the Docker engine no longer sees the files of container {self._name} (its mount of "
                "the container's file system was removed on the host while the container ran); "
                "files cannot be moved in or out of it"
            )

    @override
    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        path = files.container_path(source_path)
        # The agent's logs are read file by file and then as a folder, and the artifacts right after:
        # one archive of /logs answers for all of them.
        root = LOGS if _within(path, AGENT_LOGS) else None
        snapshot = await self._snapshot_for(path, root)
        if snapshot is not None and snapshot.member(path) is not None and not snapshot.through_link(path):
            await execs.in_thread(snapshot.extract_file, path, Path(target_path))
            return
        try:
            size = await execs.in_thread(
                files.download_file,
                self._client.api,
                self._running(),
                path,
                Path(target_path),
                self._download_budget,
            )
        except NotFound:
            await self._check_engine_view()
            raise
        self._download_budget -= size

    @override
    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        path = files.container_path(source_dir)
        snapshot = await self._snapshot_for(path, LOGS if _within(path, AGENT_LOGS) else path)
        if snapshot is not None and not snapshot.through_link(path):
            member = snapshot.member(path)
            if member is not None and member.isdir():
                await execs.in_thread(snapshot.extract_dir, path, Path(target_dir))
                return
        try:
            size = await execs.in_thread(
                files.download_dir,
                self._client.api,
                self._running(),
                path,
                Path(target_dir),
                self._download_budget,
            )
        except NotFound:
            await self._check_engine_view()
            raise
        self._download_budget -= size

    def _running(self) -> str:
        if self._container_id is None:
            raise RuntimeError("the container environment has not been started")
        return self._container_id


class EngineViewLostError(RuntimeError):
    """The engine lost its view of a running container's files (an infrastructure fault)."""


def _engine_user(user: str | int | None) -> str:
    if user is None:
        return ""  # the image's USER
    return "0" if user in _ROOT_USERS else str(user)


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder + "/")


def _executable_target(command: str) -> str | None:
    """The path of Harbor's `chmod +x PATH`, else None."""
    try:
        argv = shlex.split(command)
    except ValueError:
        return None
    if len(argv) == 3 and argv[:2] == ["chmod", "+x"] and argv[2].startswith("/"):
        return argv[2]
    return None


def _removes_reward_files(command: str) -> bool:
    """Whether `command` is Harbor's `rm -f -- FILE...` of files directly in /logs/verifier."""
    try:
        argv = shlex.split(command)
    except ValueError:
        return False
    if len(argv) < 4 or argv[:3] != ["rm", "-f", "--"]:
        return False
    return all(
        posixpath.normpath(path) == path
        and posixpath.dirname(path) == str(VERIFIER_LOGS)
        and posixpath.basename(path) not in ("", ".", "..")
        for path in argv[3:]
    )
