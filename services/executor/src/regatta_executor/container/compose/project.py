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
import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from dotenv import dotenv_values
from harbor.constants import MAIN_SERVICE_NAME
from harbor.environments.docker import COMPOSE_BUILD_PATH, COMPOSE_PREBUILT_PATH

from regatta_executor.container.compose.files import ComposeError, interpolate, load, merge, normalize_service
from regatta_executor.container.image.references import ImageUnavailableError, parse_reference

TASK_FILE = "docker-compose.yaml"
TASK_LABEL = f"environment/{TASK_FILE}"
DOTENV = ".env"
MAX_DOTENV_BYTES = 64 * 1024
MAX_SERVICES = 10
MAX_VOLUMES = 16
MAX_STRING = 64 * 1024
MAX_PATH = 4096
# Harbor's keep-alive command for `main` (its base files), which Regatta's pid 1 passes to main's
# entrypoint (pid1.py): another command for main is refused, an entrypoint is main's own.
HARBOR_MAIN_COMMAND = ["sh", "-c", "sleep infinity"]
CONDITIONS = ("service_started", "service_healthy", "service_completed_successfully")
PULL_POLICIES = ("always", "never", "missing", "if_not_present", "build")
_SERVICE_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
_VOLUME_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,254}$")
_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,31})?$")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}
TOP_LEVEL = {"services", "volumes", "networks", "version", "name"}
SERVICE_KEYS = {
    "build", "image", "environment", "command", "entrypoint", "depends_on", "healthcheck", "volumes",
    "working_dir", "user", "networks", "pull_policy", "init", "restart", "expose", "ports",
}  # fmt: skip
# Keys accepted and deliberately without effect, with the reason the attempt's log gives.
IGNORED = {
    "restart": "containers are not restarted (a service that stops stays stopped)",
    "expose": "every service's ports are open to the others on the attempt's network",
    "ports": "nothing is published on the host; services reach each other by name",
}


@dataclass(frozen=True)
class Build:
    context: Path
    dockerfile: str
    args: dict[str, str]


@dataclass(frozen=True)
class VolumeMount:
    source: str | None
    """A top-level volume's name, or None for an anonymous volume of this attempt."""
    target: str
    read_only: bool


@dataclass(frozen=True)
class Healthcheck:
    test: list[str]
    interval_ns: int | None = None
    timeout_ns: int | None = None
    retries: int | None = None
    start_period_ns: int | None = None


@dataclass(frozen=True)
class Service:
    name: str
    build: Build | None
    image: str | None
    environment: dict[str, str]
    command: list[str] | None
    entrypoint: list[str] | None
    depends_on: dict[str, str]
    healthcheck: Healthcheck | None
    """None: the image's own HEALTHCHECK (if any); test ["NONE"] disables it."""
    volumes: list[VolumeMount]
    working_dir: str | None
    user: str | None
    init: bool | None
    pull_policy: str | None = None

    @property
    def builds(self) -> bool:
        """Whether the service's image is built (as Compose decides: a build and no image, or a build
        whose pull_policy is `build`), else pulled by name."""
        return self.build is not None and (self.image is None or self.pull_policy == "build")


@dataclass(frozen=True)
class ComposeProject:
    services: dict[str, Service]
    volumes: list[str]
    notes: list[str] = field(default_factory=list)
    """Keys accepted without effect, for the attempt's log."""

    @property
    def main(self) -> Service:
        return self.services[MAIN_SERVICE_NAME]

    @property
    def sidecars(self) -> list[Service]:
        """Every service but main, each after the services it depends on."""
        ordered: list[Service] = []
        placed: set[str] = set()
        while len(placed) < len(self.services) - 1:
            for name, service in sorted(self.services.items()):
                if name == MAIN_SERVICE_NAME or name in placed:
                    continue
                if set(service.depends_on) <= placed:
                    ordered.append(service)
                    placed.add(name)
        return ordered


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
        if value is not None and _VARIABLE.match(key) and "\0" not in value
    }


class _Checker:
    """Checks each file's keys (naming that file), then the merged project (naming the task's file)."""

    def __init__(self, project_dir: Path, task_root: Path) -> None:
        self.project_dir = project_dir
        self.task_root = task_root
        self.notes: list[str] = []
        self.merged = False

    def document(self, document: dict[str, Any], label: str) -> None:
        for key in document:
            if isinstance(key, str) and key.startswith("x-"):
                continue  # extension fields: YAML anchors' homes, never read by Compose
            if key not in TOP_LEVEL:
                raise ComposeError(f"{label}: {_shown(key)} is not supported")
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
        if not isinstance(name, str) or not _SERVICE_NAME.match(name):
            raise ComposeError(f"{label}: services.{_shown(name)}: not a valid service name")
        where = f"services.{name}"
        if service is None:
            return {}
        if not isinstance(service, dict):
            raise ComposeError(f"{label}: {where} is not a mapping")
        found: dict[str, Any] = {}
        for key, value in service.items():
            if key not in SERVICE_KEYS:
                raise ComposeError(f"{label}: {where}.{_shown(key)} is not supported")
            key_where = f"{label}: {where}.{key}"
            if key in IGNORED:
                note = f"{where}.{key} is ignored: {IGNORED[key]}"
                if note not in self.notes:
                    self.notes.append(note)
                continue
            found[key] = getattr(self, f"_{key}")(value, key_where, name)
        return found

    def _build(self, value: Any, where: str, _: str) -> Build:
        if not isinstance(value, dict):
            raise ComposeError(f"{where} is not a mapping")
        for key in value:
            if key not in ("context", "dockerfile", "args"):
                raise ComposeError(f"{where}.{_shown(key)} is not supported")
        context_text = value.get("context", ".")
        if (
            not isinstance(context_text, str)
            or not context_text
            or "://" in context_text
            or "\0" in context_text
        ):
            raise ComposeError(f"{where}.context must be a folder of the task")
        dockerfile_text = value.get("dockerfile", "Dockerfile")
        if (
            not isinstance(dockerfile_text, str)
            or not dockerfile_text
            or "\0" in dockerfile_text
            or len(dockerfile_text) > MAX_PATH
        ):
            raise ComposeError(f"{where}.dockerfile must be a path inside the build context")
        args = self._mapping(value.get("args") or {}, f"{where}.args", allow_missing=True)
        if not self.merged:
            # A file may set one of context and dockerfile, another the other: where they point is
            # checked once merged (naming the task's file).
            return Build(Path(context_text), dockerfile_text, args)
        context = (self.project_dir / context_text).resolve()
        if not context.is_relative_to(self.task_root) or not context.is_dir():
            raise ComposeError(f"{where}.context {context_text[:200]!r} is not a folder inside the task")
        return Build(context, _dockerfile_in(context, dockerfile_text, f"{where}.dockerfile"), args)

    def _image(self, value: Any, where: str, _: str) -> str:
        if not isinstance(value, str):
            raise ComposeError(f"{where} is not a string")
        try:
            parse_reference(value, where)  # a full reference: never an id, never the platform's own
            return value
        except ImageUnavailableError:
            raise ComposeError(f"{where} {value[:200]!r} is not an image reference") from None

    def _environment(self, value: Any, where: str, _: str) -> dict[str, str]:
        return self._mapping(value, where, allow_missing=True)

    def _mapping(self, value: Any, where: str, *, allow_missing: bool) -> dict[str, str]:
        if not isinstance(value, dict):
            raise ComposeError(f"{where} is not a mapping or a list of KEY=VALUE")
        found: dict[str, str] = {}
        for key, item in value.items():
            if not isinstance(key, str) or not _VARIABLE.match(key):
                raise ComposeError(f"{where}: {_shown(key)} is not a variable name")
            if item is None and allow_missing:
                continue  # a bare name takes its value from Compose's own environment: none here
            if isinstance(item, bool):
                item = "true" if item else "false"
            if not isinstance(item, str | int | float):
                raise ComposeError(f"{where}.{key} is not a string or a number")
            found[key] = self._text(str(item), f"{where}.{key}")
        return found

    def _text(self, value: str, where: str) -> str:
        if "\0" in value or len(value) > MAX_STRING:
            raise ComposeError(f"{where} holds a NUL byte or is longer than {MAX_STRING} characters")
        return value

    def _words(self, value: Any, where: str) -> list[str]:
        if isinstance(value, str):
            try:
                value = shlex.split(value)
            except ValueError as exc:
                raise ComposeError(f"{where}: {exc}") from None
        if not isinstance(value, list) or not all(isinstance(word, str) for word in value):
            raise ComposeError(f"{where} is not a string or a list of strings")
        return [self._text(word, where) for word in value]

    def _command(self, value: Any, where: str, _: str) -> list[str]:
        return self._words(value, where)

    def _entrypoint(self, value: Any, where: str, _: str) -> list[str]:
        return self._words(value, where)

    def _depends_on(self, value: Any, where: str, name: str) -> dict[str, str]:
        if not isinstance(value, dict):
            raise ComposeError(f"{where} is not a list or a mapping")
        found = {}
        for dependency, spec in value.items():
            if not isinstance(dependency, str) or not _SERVICE_NAME.match(dependency):
                raise ComposeError(f"{where}: {_shown(dependency)} is not a service name")
            spec = spec or {}
            if not isinstance(spec, dict):
                raise ComposeError(f"{where}.{dependency} is not a mapping")
            for key in spec:
                if key not in ("condition", "required"):
                    raise ComposeError(f"{where}.{dependency}.{_shown(key)} is not supported")
            condition = spec.get("condition", "service_started")
            if condition not in CONDITIONS:
                raise ComposeError(
                    f"{where}.{dependency}.condition {_shown(condition)} is not one of "
                    f"{', '.join(CONDITIONS)}"
                )
            found[dependency] = condition
        return found

    def _healthcheck(self, value: Any, where: str, _: str) -> Healthcheck:
        if not isinstance(value, dict):
            raise ComposeError(f"{where} is not a mapping")
        for key in value:
            if key not in ("test", "interval", "timeout", "retries", "start_period", "disable"):
                raise ComposeError(f"{where}.{_shown(key)} is not supported")
        if value.get("disable") is True:
            return Healthcheck(["NONE"])
        test = value.get("test")
        if isinstance(test, str):
            test = ["CMD-SHELL", self._text(test, f"{where}.test")]
        else:
            test = self._words(test, f"{where}.test")
            if not test or test[0] not in ("CMD", "CMD-SHELL", "NONE"):
                raise ComposeError(f"{where}.test must start with CMD, CMD-SHELL or NONE")
        retries = value.get("retries")
        if retries is not None and (
            isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= 1000
        ):
            raise ComposeError(f"{where}.retries is not a number from 0 to 1000")
        return Healthcheck(
            test,
            interval_ns=self._duration(value.get("interval"), f"{where}.interval"),
            timeout_ns=self._duration(value.get("timeout"), f"{where}.timeout"),
            retries=retries,
            start_period_ns=self._duration(value.get("start_period"), f"{where}.start_period"),
        )

    def _duration(self, value: Any, where: str) -> int | None:
        if value is None:
            return None
        text = str(value)
        if isinstance(value, int | float) and not isinstance(value, bool):
            text = f"{value}s"
        total, position = 0, 0
        for match in _DURATION.finditer(text):
            if match.start() != position:
                break
            total += int(float(match.group(1)) * _UNITS[match.group(2)])
            position = match.end()
        if position != len(text) or not text or total > 3600 * 10**9:
            raise ComposeError(f"{where} {text[:40]!r} is not a duration of at most 1h (like 2s or 1m30s)")
        return total

    def _volumes(self, value: Any, where: str, _: str) -> list[VolumeMount]:
        if not isinstance(value, list):
            raise ComposeError(f"{where} is not a list")
        return [self._mount(item, f"{where}[{index}]") for index, item in enumerate(value)]

    def _mount(self, item: Any, where: str) -> VolumeMount:
        if isinstance(item, str):
            parts = item.split(":")
            if len(parts) == 1:
                source, target, mode = None, parts[0], ""
            elif len(parts) in (2, 3):
                source, target, mode = parts[0], parts[1], parts[2] if len(parts) == 3 else ""
            else:
                raise ComposeError(f"{where} {item[:200]!r} is not NAME:/path[:ro]")
            if mode not in ("", "ro", "rw"):
                raise ComposeError(f"{where}: mode {mode[:40]!r} is not supported (ro or rw)")
            read_only = mode == "ro"
        elif isinstance(item, dict):
            for key in item:
                if key not in ("type", "source", "target", "read_only"):
                    raise ComposeError(f"{where}.{_shown(key)} is not supported")
            if item.get("type", "volume") != "volume":
                raise ComposeError(
                    f"{where}.type {_shown(item.get('type'))} is not supported (named volumes only)"
                )
            source, target, read_only = item.get("source"), item.get("target"), item.get("read_only", False)
            if not isinstance(read_only, bool):
                raise ComposeError(f"{where}.read_only is not true or false")
        else:
            raise ComposeError(f"{where} is not a string or a mapping")
        if source is not None and (not isinstance(source, str) or not _VOLUME_NAME.match(source)):
            # ./data, /srv, ~/x: a host folder. The container environment mounts none.
            raise ComposeError(f"{where}: host bind mounts are not supported (only named volumes)")
        if not isinstance(target, str) or not target.startswith("/") or "\0" in target or len(target) > 4096:
            raise ComposeError(f"{where}: the target is not an absolute path")
        normal = PurePosixPath(target)
        if normal == PurePosixPath("/") or any(
            normal == reserved or normal.is_relative_to(reserved)
            for reserved in (PurePosixPath("/logs"), PurePosixPath("/.regatta"))
        ):
            raise ComposeError(f"{where}: {target[:200]!r} is reserved for the attempt's logs and pid 1")
        return VolumeMount(source, str(normal), read_only)

    def _working_dir(self, value: Any, where: str, _: str) -> str:
        if not isinstance(value, str) or not value.startswith("/") or "\0" in value or len(value) > 4096:
            raise ComposeError(f"{where} is not an absolute path")
        return value

    def _user(self, value: Any, where: str, _: str) -> str:
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str) or not _USER.match(value):
            raise ComposeError(f"{where} is not a user name or uid[:gid]")
        return value

    def _networks(self, value: Any, where: str, _: str) -> None:
        if not isinstance(value, dict) or any(name != "default" for name in value):
            raise ComposeError(f"{where}: only the default network is supported")
        if value.get("default"):
            raise ComposeError(f"{where}.default: network options are not supported")

    def _pull_policy(self, value: Any, where: str, _: str) -> str:
        if value not in PULL_POLICIES:
            raise ComposeError(f"{where} {_shown(value)} is not one of {', '.join(PULL_POLICIES)}")
        return str(value)

    def _init(self, value: Any, where: str, _: str) -> bool:
        if not isinstance(value, bool):
            raise ComposeError(f"{where} is not true or false")
        return value

    def volumes(self, value: Any, label: str) -> list[str]:
        if value is None:
            return []
        if not isinstance(value, dict):
            raise ComposeError(f"{label}: volumes is not a mapping")
        if len(value) > MAX_VOLUMES:
            raise ComposeError(f"{label}: more than {MAX_VOLUMES} volumes")
        for name, spec in value.items():
            if not isinstance(name, str) or not _VOLUME_NAME.match(name):
                raise ComposeError(f"{label}: volumes.{_shown(name)}: not a valid volume name")
            if spec:  # driver, driver_opts (a bind in disguise), external, name, labels
                key = next(iter(spec)) if isinstance(spec, dict) else None
                raise ComposeError(
                    f"{label}: volumes.{name}.{_shown(key)} is not supported (plain named volumes only)"
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


def _dockerfile_in(context: Path, text: str, where: str) -> str:
    """The Dockerfile's path relative to the (resolved) build context. As Compose does, a relative
    `dockerfile` is taken from the context and an absolute one as it is (`${CONTEXT_DIR}/Dockerfile`);
    either must lead, links followed, to a file inside the context, since only the context is sent and
    a path out of it would make a file of the executor's host the Dockerfile. A path out of the context
    even before links are followed is refused without touching the host's files."""
    named = context / text  # `context / "/abs"` is "/abs"
    lexical = Path(os.path.normpath(named))
    resolved = named.resolve() if lexical.is_relative_to(context) else lexical
    if not resolved.is_relative_to(context):
        raise ComposeError(
            f"{where} {text[:200]!r} resolves to {str(resolved)[:400]}, outside the build context {context}"
        )
    if not resolved.is_file():
        raise ComposeError(f"{where} {text[:200]!r} is not a file inside the build context")
    return resolved.relative_to(context).as_posix()


def _shown(value: Any) -> str:
    """A key or value of the author's file, safe to repeat in a message (short, printable)."""
    text = str(value)
    if len(text) > 60 or not text.isprintable():
        return repr(text[:60])
    return text
