"""A compose task in the container environment: its project loaded as Harbor's docker environment merges
it, every service's image, the attempt's network and volumes, the sidecars started before main (in
`depends_on` order, sidecars.py), main's settings from the project, and what Harbor asks of a sidecar
(a command, a stop, a download). ContainerEnvironment hands each of its service calls here."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import docker
from harbor.environments.base import BaseEnvironment, ExecResult, ServiceOperationsUnsupportedError
from harbor.environments.definition import should_use_prebuilt_docker_image
from harbor.models.task.config import EnvironmentConfig
from harbor.utils.env import resolve_env_vars

from regatta_executor.container.compose.model import ComposeProject
from regatta_executor.container.compose.project import load_project
from regatta_executor.container.compose.sidecars import ComposeRun
from regatta_executor.container.exec import commands as execs
from regatta_executor.container.exec.harbor_commands import engine_user
from regatta_executor.container.files import archive as files
from regatta_executor.container.image.resolved import ResolvedImage

# Resolves one service's image: (force_build, reference=…) or (force_build, context=…, dockerfile=…,
# buildargs=…), as Provisioning.image does with the task's values.
ImageOf = Callable[..., Awaitable[ResolvedImage]]
# The engine's configuration of a container of the attempt, and the limits it enforces (Provisioning.config).
ConfigOf = Callable[..., tuple[dict[str, Any], set[str]]]


def load_compose(environment: BaseEnvironment, *, force_build: bool) -> ComposeProject:
    """The task's compose project merged as Harbor's docker environment merges it: its base file, the
    task's file, run-level extra files and main's env, `${VAR}` from Harbor's infrastructure variables
    over the task's env (never this process's environment)."""
    env = environment
    return _load(
        env.environment_dir,
        task=env.task_env_config,
        persistent_env=env._persistent_env,
        environment_id=env.environment_id,
        cpus=env._effective_cpus,
        memory_mb=env._effective_memory_mb,
        main_environment=env._startup_env(),
        extra_files=list(env.extra_docker_compose_paths),
        force_build=force_build,
    )


def _load(
    environment_dir: Path,
    *,
    task: EnvironmentConfig,
    persistent_env: Mapping[str, str],
    environment_id: str,
    cpus: float | None,
    memory_mb: int | None,
    main_environment: dict[str, str],
    extra_files: list[Path],
    force_build: bool,
) -> ComposeProject:
    prebuilt = should_use_prebuilt_docker_image(
        environment_dir, docker_image=task.docker_image, force_build=force_build
    )
    variables = {
        **(resolve_env_vars(task.env) if task.env else {}),
        **persistent_env,
        "MAIN_IMAGE_NAME": f"hb__{environment_id}",
        "CONTEXT_DIR": str(environment_dir.resolve()),
    }
    if prebuilt and task.docker_image:
        variables["PREBUILT_IMAGE_NAME"] = task.docker_image
    if cpus:
        variables["CPUS"] = str(cpus)
    if memory_mb:
        variables["MEMORY"] = f"{memory_mb}M"
    return load_project(
        environment_dir,
        variables=variables,
        main_environment=main_environment,
        extra_files=extra_files,
        prebuilt=prebuilt,
    )


class ComposeServices:
    """One attempt's compose project and, once started, its services on the engine."""

    def __init__(self, project: ComposeProject, api: docker.APIClient, *, max_output_bytes: int) -> None:
        self.project = project
        self.api = api
        self.max_output_bytes = max_output_bytes
        self.run: ComposeRun | None = None

    async def start(
        self,
        client: docker.DockerClient,
        name: str,
        labels: dict[str, str],
        logger: logging.Logger,
        image_of: ImageOf,
        config_of: ConfigOf,
        limits: dict[str, Any],
        *,
        force_build: bool,
        public: bool,
        dns_upstreams: str | None,
    ) -> tuple[ResolvedImage, str]:
        """Build or pull every service's image, make the attempt's network and volumes, start the
        sidecars in dependency order, each in the agent's container configuration (labels, `limits`,
        hardening), and wait for what main depends on; returns main's image and network."""
        project = self.project
        images: dict[str, ResolvedImage] = {}
        for service in project.services.values():
            if service.builds and service.build is not None:
                images[service.name] = await image_of(
                    force_build,
                    context=service.build.context,
                    dockerfile=service.build.dockerfile,
                    buildargs=service.build.args,
                )
            else:
                assert service.image is not None  # load_project refuses a service with neither
                images[service.name] = await image_of(force_build, reference=service.image)
        run = self.run = ComposeRun(client, project, name, labels, logger)
        network = await execs.in_thread(run.create_network, public=public, dns_upstreams=dns_upstreams)
        await execs.in_thread(run.create_volumes)

        def sidecar_config(image: str, name: str) -> tuple[dict[str, Any], set[str]]:
            # pid 1's settings are dropped for a sidecar (sidecars.PID1_KEYS), its tools mount too.
            return config_of(
                image=image,
                name=name,
                network=run.network,
                workdir=None,
                image_entrypoint=(),
                image_workdir="",
                limits=limits,
            )

        await execs.in_thread(run.start_sidecars, images, sidecar_config)
        await execs.in_thread(run.wait_for, project.main)
        return images[project.main.name], network

    @property
    def network(self) -> str:
        assert self.run is not None, "started"
        return self.run.network

    def configure_main(self, config: dict[str, Any], default_user: str) -> str:
        """Compose's main in the agent's container configuration: its environment, its user, its named
        volumes and its name on the attempt's network; returns the user of commands given none."""
        main = self.project.main
        if self.run is None:
            return default_user
        if main.user:
            config["user"] = main.user  # the container's user, as Compose sets it
        config["environment"] = {**(config.get("environment") or {}), **main.environment}
        config["mounts"] = [*config["mounts"], *self.run.mounts(main)]
        self.run.attach(config, main)
        return main.user or default_user

    def sidecar(self, service: str | None) -> str:
        run = self.run
        if run is None or service not in run.containers:
            raise ServiceOperationsUnsupportedError(f"the attempt has no running compose service {service!r}")
        return run.containers[service]

    async def exec(
        self,
        service: str | None,
        command: str,
        *,
        cwd: str | None,
        env: dict[str, str] | None,
        timeout_sec: int | None,
        user: str | int | None,
    ) -> ExecResult:
        """A command in a sidecar, as Harbor's docker environment runs one: `sh -c` (sidecar images often
        lack bash), without main's working folder, user or persistent env."""
        output = await execs.run_command(
            self.api,
            self.sidecar(service),
            ["sh", "-c", command],
            env=env or {},
            user=engine_user(user),
            workdir=cwd,
            timeout_sec=timeout_sec,
            max_output_bytes=self.max_output_bytes,
        )
        return ExecResult(stdout=output.stdout, stderr=output.stderr, return_code=output.return_code)

    async def download(
        self,
        fetch: Callable[..., int],
        source: str,
        target: Path | str,
        service: str | None,
        budget: int,
    ) -> int:
        """A sidecar's file or folder (Harbor's sidecar artifacts), through the same checked archive
        extraction as main's and within `budget`; returns the bytes it took."""
        return await execs.in_thread(
            fetch, self.api, self.sidecar(service), files.container_path(source), Path(target), budget
        )

    async def stop(self, delete: bool) -> None:
        if self.run is not None:
            await execs.in_thread(self.run.stop, delete)
