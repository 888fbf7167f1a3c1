"""The value of each supported key of a compose service, checked and in one form, naming the file and
the key it refuses: build contexts and Dockerfiles inside the task's folder, images as full references,
environments, commands, `depends_on` conditions, healthchecks, named volumes only, users, pull policies.
The project's checker (project.py) is built on these."""

from __future__ import annotations

import os
import shlex
from pathlib import Path, PurePosixPath
from typing import Any

from regatta_executor.container.compose.files import ComposeError
from regatta_executor.container.compose.model import (
    CONDITIONS,
    DURATION,
    MAX_PATH,
    MAX_STRING,
    PULL_POLICIES,
    SERVICE_NAME,
    UNITS,
    USER,
    VARIABLE,
    VOLUME_NAME,
    Build,
    Healthcheck,
    VolumeMount,
)
from regatta_executor.container.image.references import ImageUnavailableError, parse_reference


class ServiceKeys:
    """Each key's check, for the project's checker: the task's folder bounds build contexts, and each
    key ignored is noted once."""

    def __init__(self, project_dir: Path, task_root: Path) -> None:
        self.project_dir = project_dir
        self.task_root = task_root
        self.notes: list[str] = []
        self.merged = False

    def _build(self, value: Any, where: str, _: str) -> Build:
        if not isinstance(value, dict):
            raise ComposeError(f"{where} is not a mapping")
        for key in value:
            if key not in ("context", "dockerfile", "args"):
                raise ComposeError(f"{where}.{shown(key)} is not supported")
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
        return Build(context, dockerfile_in(context, dockerfile_text, f"{where}.dockerfile"), args)

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
            if not isinstance(key, str) or not VARIABLE.match(key):
                raise ComposeError(f"{where}: {shown(key)} is not a variable name")
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
            if not isinstance(dependency, str) or not SERVICE_NAME.match(dependency):
                raise ComposeError(f"{where}: {shown(dependency)} is not a service name")
            spec = spec or {}
            if not isinstance(spec, dict):
                raise ComposeError(f"{where}.{dependency} is not a mapping")
            for key in spec:
                if key not in ("condition", "required"):
                    raise ComposeError(f"{where}.{dependency}.{shown(key)} is not supported")
            condition = spec.get("condition", "service_started")
            if condition not in CONDITIONS:
                raise ComposeError(
                    f"{where}.{dependency}.condition {shown(condition)} is not one of {', '.join(CONDITIONS)}"
                )
            found[dependency] = condition
        return found

    def _healthcheck(self, value: Any, where: str, _: str) -> Healthcheck:
        if not isinstance(value, dict):
            raise ComposeError(f"{where} is not a mapping")
        for key in value:
            if key not in ("test", "interval", "timeout", "retries", "start_period", "disable"):
                raise ComposeError(f"{where}.{shown(key)} is not supported")
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
        for match in DURATION.finditer(text):
            if match.start() != position:
                break
            total += int(float(match.group(1)) * UNITS[match.group(2)])
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
                    raise ComposeError(f"{where}.{shown(key)} is not supported")
            if item.get("type", "volume") != "volume":
                raise ComposeError(
                    f"{where}.type {shown(item.get('type'))} is not supported (named volumes only)"
                )
            source, target, read_only = item.get("source"), item.get("target"), item.get("read_only", False)
            if not isinstance(read_only, bool):
                raise ComposeError(f"{where}.read_only is not true or false")
        else:
            raise ComposeError(f"{where} is not a string or a mapping")
        if source is not None and (not isinstance(source, str) or not VOLUME_NAME.match(source)):
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
        if not isinstance(value, str) or not USER.match(value):
            raise ComposeError(f"{where} is not a user name or uid[:gid]")
        return value

    def _networks(self, value: Any, where: str, _: str) -> None:
        if not isinstance(value, dict) or any(name != "default" for name in value):
            raise ComposeError(f"{where}: only the default network is supported")
        if value.get("default"):
            raise ComposeError(f"{where}.default: network options are not supported")

    def _pull_policy(self, value: Any, where: str, _: str) -> str:
        if value not in PULL_POLICIES:
            raise ComposeError(f"{where} {shown(value)} is not one of {', '.join(PULL_POLICIES)}")
        return str(value)

    def _init(self, value: Any, where: str, _: str) -> bool:
        if not isinstance(value, bool):
            raise ComposeError(f"{where} is not true or false")
        return value


def dockerfile_in(context: Path, text: str, where: str) -> str:
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


def shown(value: Any) -> str:
    """A key or value of the author's file, safe to repeat in a message (short, printable)."""
    text = str(value)
    if len(text) > 60 or not text.isprintable():
        return repr(text[:60])
    return text
