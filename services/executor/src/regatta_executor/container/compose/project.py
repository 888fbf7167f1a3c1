"""A task's `environment/docker-compose.yaml`, merged as Harbor's `docker` environment merges it and
checked against what the container environment runs, before anything is created on the engine.

Harbor runs `docker compose --project-directory environment/ -f <base> -f environment/docker-compose.yaml
-f <extra files> -f <env override>` where the base is its `docker-compose-build.yaml` (service `main`
built from `${CONTEXT_DIR}`, command `sh -c "sleep infinity"`) or, for a task with a prebuilt
`docker_image`, `docker-compose-prebuilt.yaml` (`image: ${PREBUILT_IMAGE_NAME}`). The same files are
read here (Harbor's own base files from its package), in that order, with relative paths taken from
the project directory as Compose does. Harbor's resources override is left out (the container
environment applies the task's limits to every container itself) and so is its mounts override
(nothing of the host is mounted).

The task author is not trusted: every key outside the supported set is refused naming the file and the
key (`environment/docker-compose.yaml: services.db.privileged is not supported`), and so is anything
that would reach the host: bind mounts, volume drivers, build contexts outside the task's folder,
other networks or network modes, published ports are ignored rather than published.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dotenv import dotenv_values
from harbor.constants import MAIN_SERVICE_NAME
from harbor.environments.docker import COMPOSE_BUILD_PATH, COMPOSE_PREBUILT_PATH

from regatta_executor.container.compose.files import ComposeError, interpolate, load, merge, normalize_service
from regatta_executor.container.compose.model import (
    DOTENV,
    HARBOR_MAIN_COMMAND,
    IGNORED,
    MAX_DOTENV_BYTES,
    MAX_SERVICES,
    MAX_VOLUMES,
    SERVICE_KEYS,
    SERVICE_NAME,
    TASK_FILE,
    TASK_LABEL,
    TOP_LEVEL,
    VARIABLE,
    VOLUME_NAME,
    ComposeProject,
    Service,
)
from regatta_executor.container.compose.service_keys import ServiceKeys, shown


def compose_files(environment_dir: Path, extra: list[Path], *, prebuilt: bool) -> list[tuple[Path, str]]:
    """The files Harbor's docker environment passes, in its `-f` order, each with the label errors name."""
    base = COMPOSE_PREBUILT_PATH if prebuilt else COMPOSE_BUILD_PATH
    files = [(base, f"Harbor's {base.name}"), (environment_dir / TASK_FILE, TASK_LABEL)]
    files += [(path, f"extra compose file {path.name}") for path in extra]
    return files


def load_project(
    environment_dir: Path,
    *,
    variables: Mapping[str, str],
    main_environment: Mapping[str, str] | None = None,
    extra_files: list[Path] | None = None,
    prebuilt: bool = False,
) -> ComposeProject:
    """The merged, checked project of a task whose environment folder holds a docker-compose.yaml.

    `variables` are the only values `${VAR}` forms are replaced with (Harbor's infrastructure variables
    over the task's env); `main_environment` is Harbor's env override of main (the task's env and the
    trial's persistent env), merged last as Harbor does."""
    project_dir = environment_dir.resolve()
    checker = _Checker(project_dir, task_root=project_dir.parent)
    task_file = environment_dir / TASK_FILE
    if task_file.is_symlink() or not task_file.resolve().is_relative_to(project_dir):
        # A link to a file of the executor's host would make its contents the project (and so the
        # services' environment, which the agent reads).
        raise ComposeError(f"{TASK_LABEL}: a symbolic link (the file must be the task's own)")
    # Compose reads the project folder's .env for interpolation, below every other variable.
    variables = {**dotenv_variables(environment_dir), **variables}
    documents = []
    for path, label in compose_files(environment_dir, list(extra_files or []), prebuilt=prebuilt):
        document = interpolate(load(path, label), variables, label)
        checker.document(document, label)
        documents.append(document)
    if main_environment:
        documents.append({"services": {MAIN_SERVICE_NAME: {"environment": dict(main_environment)}}})
    return checker.project(merge(documents))


def dotenv_variables(environment_dir: Path) -> dict[str, str]:
    """The variables of `environment/.env`, as Compose reads them for interpolation (values literal)."""
    path = environment_dir / DOTENV
    if not path.exists() and not path.is_symlink():
        return {}
    if path.is_symlink() or not path.is_file():
        raise ComposeError(f"environment/{DOTENV}: a symbolic link or not a file (it must be the task's own)")
    if path.stat().st_size > MAX_DOTENV_BYTES:
        raise ComposeError(f"environment/{DOTENV}: larger than {MAX_DOTENV_BYTES // 1024} KiB")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ComposeError(f"environment/{DOTENV}: not UTF-8 text") from None
    # interpolate=False: python-dotenv would fill ${VAR} in values from this process's environment.
    values = dotenv_values(stream=io.StringIO(text), interpolate=False)
    return {
        key: value
        for key, value in values.items()
        if value is not None and VARIABLE.match(key) and "\0" not in value
    }


class _Checker(ServiceKeys):
    """Checks each file's keys (naming that file), then the merged project (naming the task's file)."""

    def document(self, document: dict[str, Any], label: str) -> None:
        for key in document:
            if isinstance(key, str) and key.startswith("x-"):
                continue  # extension fields: YAML anchors' homes, never read by Compose
            if key not in TOP_LEVEL:
                raise ComposeError(f"{label}: {shown(key)} is not supported")
        services = document.get("services") or {}
        if not isinstance(services, dict):
            raise ComposeError(f"{label}: services is not a mapping")
        if len(services) > MAX_SERVICES:
            raise ComposeError(f"{label}: more than {MAX_SERVICES} services")
        for name, service in services.items():
            self.service(name, normalize_service(service), label)
        self.volumes(document.get("volumes"), label)
        self.networks(document.get("networks"), label)

    def service(self, name: Any, service: Any, label: str) -> dict[str, Any]:
        """The service's supported keys, each checked and in one form (only the keys it has)."""
        if not isinstance(name, str) or not SERVICE_NAME.match(name):
            raise ComposeError(f"{label}: services.{shown(name)}: not a valid service name")
        where = f"services.{name}"
        if service is None:
            return {}
        if not isinstance(service, dict):
            raise ComposeError(f"{label}: {where} is not a mapping")
        found: dict[str, Any] = {}
        for key, value in service.items():
            if key not in SERVICE_KEYS:
                raise ComposeError(f"{label}: {where}.{shown(key)} is not supported")
            key_where = f"{label}: {where}.{key}"
            if key in IGNORED:
                note = f"{where}.{key} is ignored: {IGNORED[key]}"
                if note not in self.notes:
                    self.notes.append(note)
                continue
            found[key] = getattr(self, f"_{key}")(value, key_where, name)
        return found

    def volumes(self, value: Any, label: str) -> list[str]:
        if value is None:
            return []
        if not isinstance(value, dict):
            raise ComposeError(f"{label}: volumes is not a mapping")
        if len(value) > MAX_VOLUMES:
            raise ComposeError(f"{label}: more than {MAX_VOLUMES} volumes")
        for name, spec in value.items():
            if not isinstance(name, str) or not VOLUME_NAME.match(name):
                raise ComposeError(f"{label}: volumes.{shown(name)}: not a valid volume name")
            if spec:  # driver, driver_opts (a bind in disguise), external, name, labels
                key = next(iter(spec)) if isinstance(spec, dict) else None
                raise ComposeError(
                    f"{label}: volumes.{name}.{shown(key)} is not supported (plain named volumes only)"
                )
        return list(value)

    def networks(self, value: Any, label: str) -> None:
        if value is None:
            return
        if not isinstance(value, dict) or any(name != "default" for name in value):
            raise ComposeError(f"{label}: networks: only the default network is supported")
        if value.get("default"):
            raise ComposeError(f"{label}: networks.default: network options are not supported")

    def project(self, merged: dict[str, Any]) -> ComposeProject:
        label = TASK_LABEL
        self.merged = True
        services_raw = merged.get("services") or {}
        volumes = self.volumes(merged.get("volumes"), label)
        services: dict[str, Service] = {}
        for name, raw in services_raw.items():
            checked = self.service(name, raw, label)
            services[name] = self._finished(name, checked, label, volumes)
        if MAIN_SERVICE_NAME not in services:
            raise ComposeError(f"{label}: no service {MAIN_SERVICE_NAME!r}")
        for name, service in services.items():
            for dependency in service.depends_on:
                if dependency not in services:
                    raise ComposeError(f"{label}: services.{name}.depends_on: no service {dependency!r}")
                if dependency == MAIN_SERVICE_NAME:
                    raise ComposeError(
                        f"{label}: services.{name}.depends_on.main is not supported (main, the agent's "
                        "container, starts last)"
                    )
        self._acyclic(services, label)
        return ComposeProject(services, volumes, list(self.notes))

    def _finished(self, name: str, checked: dict[str, Any], label: str, volumes: list[str]) -> Service:
        where = f"{label}: services.{name}"
        build, image = checked.get("build"), checked.get("image")
        if checked.get("pull_policy") == "build" and build is None:
            raise ComposeError(f"{where}.pull_policy is build but the service has no build")
        if build is None and image is None:
            raise ComposeError(f"{where} has neither build nor image")
        if name == MAIN_SERVICE_NAME:
            if checked.get("command", HARBOR_MAIN_COMMAND) != HARBOR_MAIN_COMMAND:
                raise ComposeError(
                    f"{where}.command is not supported: Harbor's `sleep infinity` keeps the agent's "
                    "container up (its pid 1 starts the entrypoint with it)"
                )
            if checked.get("init") is not None:
                raise ComposeError(f"{where}.init is not supported: the agent's container has its own pid 1")
            if checked.get("healthcheck") is not None:
                self.notes.append(
                    f"services.{name}.healthcheck is ignored: main runs Regatta's pid 1, not a server"
                )
        mounts = checked.get("volumes") or []
        for mount in mounts:
            if mount.source is not None and mount.source not in volumes:
                raise ComposeError(
                    f"{where}.volumes: {mount.source!r} is not declared under the top-level volumes"
                )
        return Service(
            name=name,
            build=build,
            image=image,
            environment=checked.get("environment") or {},
            command=checked.get("command"),
            entrypoint=checked.get("entrypoint"),
            depends_on=checked.get("depends_on") or {},
            healthcheck=checked.get("healthcheck"),
            volumes=mounts,
            working_dir=checked.get("working_dir"),
            user=checked.get("user"),
            init=checked.get("init"),
            pull_policy=checked.get("pull_policy"),
        )

    @staticmethod
    def _acyclic(services: dict[str, Service], label: str) -> None:
        state: dict[str, int] = {}
        for start in services:
            stack = [(start, iter(services[start].depends_on))]
            if state.get(start):
                continue
            state[start] = 1
            while stack:
                name, pending = stack[-1]
                step = next(pending, None)
                if step is None:
                    state[name] = 2
                    stack.pop()
                elif state.get(step) == 1:
                    raise ComposeError(f"{label}: services.{step}.depends_on: a dependency cycle")
                elif not state.get(step):
                    state[step] = 1
                    stack.append((step, iter(services[step].depends_on)))
