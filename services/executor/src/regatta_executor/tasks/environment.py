"""What a task's environment asks for, against what the chosen environment gives it.

The `local` environment runs a task on this host's own system: it honours the Dockerfile's FROM-less
WORKDIR and nothing else. A task whose Dockerfile installs, copies or sets anything (RUN, COPY, ADD,
ENV, USER, …), that names a prebuilt image, or that runs its agent or verifier as a user other than
root (`local` runs every command as its sandbox's root) gets an environment other than the one it
declares, and its score may say more about this host than about the agent: each such attempt says so
(never silent).
A task with a docker-compose.yaml needs sidecar services, which `local` does not run (`container` does).
A separate verifier or GPUs, which neither of Regatta's environments gives, are refused (task_features.py).
"""

from __future__ import annotations

import contextlib
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harbor.environments.definition import COMPOSE_FILE_NAME
from harbor.models.task.config import TaskConfig
from pydantic import ValidationError
from regatta_shared.events import AttemptImage
from regatta_shared.events.integrity import AttemptIntegrity

from ..environments.choice import COMPOSE_ENVIRONMENT, OWN_ENVIRONMENTS, EnvironmentChoice
from .errors import TaskEnvironmentError
from .features import unsupported_features

# Instructions that change nothing a command inside the task sees (FROM and WORKDIR are what `local`
# honours of an image: it runs on the host's system, in the last WORKDIR). Any other instruction, or a
# line this parser does not know, means the environment the task declares was not built.
HARMLESS = frozenset(
    {
        "FROM",
        "WORKDIR",
        "ARG",
        "LABEL",
        "MAINTAINER",
        "EXPOSE",
        "CMD",
        "ENTRYPOINT",
        "STOPSIGNAL",
        "HEALTHCHECK",
        "SHELL",
        "VOLUME",
    }
)
MAX_DOCKERFILE_BYTES = 1024 * 1024  # a larger one is not read: it is reported as not built
MAX_NAMED = 8  # instructions named in a note; the rest is "…"
_KEYWORD = re.compile(r"^[A-Z]{2,20}$")
_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}$")
_ESCAPE_DIRECTIVE = re.compile(r"^#\s*escape\s*=\s*(\S)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class EnvironmentFidelity:
    built: bool | None  # None: the environment builds it its own way (Harbor types, other classes)
    note: str | None
    image: AttemptImage | None = None  # the image the container ran, where the environment says
    integrity: AttemptIntegrity | None = None  # what it saw before the verifier ran, where it looks


def dockerfile_instructions(text: str) -> list[str]:
    """The instruction keywords of a Dockerfile, in order (continuation lines joined, comments and
    blank lines skipped; the `# escape=` parser directive honoured)."""
    lines = text.splitlines()
    escape = "\\"
    for line in lines:
        directive = _ESCAPE_DIRECTIVE.match(line.strip())
        if directive:
            escape = directive.group(1)
            continue
        if line.strip():
            break  # parser directives come only before the first other line
    keywords: list[str] = []
    continuing = False
    for line in lines:
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue  # inside a continued instruction too, as Docker does
        if not continuing:
            keywords.append(stripped.split(None, 1)[0].upper())
        continuing = stripped.endswith(escape)
    return keywords


def unhonoured_instructions(dockerfile: Path) -> list[str]:
    """The Dockerfile's instructions that running on the host ignores, each named once, in order."""
    try:
        if dockerfile.stat().st_size > MAX_DOCKERFILE_BYTES:
            return ["(a Dockerfile too large to read)"]
        text = dockerfile.read_text(errors="replace")
    except FileNotFoundError:
        return []
    except OSError:
        return ["(an unreadable Dockerfile)"]
    found: list[str] = []
    for keyword in dockerfile_instructions(text):
        # The file is the task author's: only instruction-like words are repeated back, and few of them.
        shown = keyword if _KEYWORD.match(keyword) else "(an unknown line)"
        if keyword not in HARMLESS and shown not in found:
            found.append(shown)
    if len(found) > MAX_NAMED:
        found = [*found[:MAX_NAMED], "…"]
    return found


def _task_toml(task_dir: Path) -> dict[str, Any]:
    try:
        return tomllib.loads((task_dir / "task.toml").read_text(errors="replace"))
    except (OSError, tomllib.TOMLDecodeError):
        return {}


def declared_image(task_dir: Path) -> str | None:
    """`[environment].docker_image` of the task's task.toml, if any (Harbor has validated the file)."""
    image = (_task_toml(task_dir).get("environment") or {}).get("docker_image")
    return image[:200] if isinstance(image, str) and image else None


def declared_users(task_dir: Path) -> list[str]:
    """`[agent].user` and `[verifier].user` of the task's task.toml other than root, each as
    `<section>.user 'name'`: `local` runs every command as its sandbox's root, whatever they say."""
    config = _task_toml(task_dir)
    found = []
    for section in ("agent", "verifier"):
        user = (config.get(section) or {}).get("user")
        if isinstance(user, bool) or not isinstance(user, str | int) or str(user) in ("", "0", "root"):
            continue
        shown = str(user) if _USER.match(str(user)) else "(an unusual name)"
        found.append(f"[{section}].user {shown!r}")
    return found


def _check_compose(task_dir: Path) -> None:
    """The task's compose file as the container environment will read it (the same refusals, raised
    here so that the attempt errors once and is not retried); the environment checks it again with the
    trial's own variables."""
    # Imported here: only a compose task under `container` needs the container package (docker SDK).
    from ..container.compose.files import ComposeError
    from ..container.compose.project import load_project
    from .variables import resolve_task_env

    env = (_task_toml(task_dir).get("environment") or {}).get("env") or {}
    env = {str(key): str(value) for key, value in env.items()} if isinstance(env, dict) else {}
    with contextlib.suppress(ValueError):  # a `${VAR}` nothing fills: refused before the trial is made
        env = resolve_task_env(env)
    environment_dir = task_dir / "environment"
    image = declared_image(task_dir)
    variables = {**env, "CONTEXT_DIR": str(environment_dir.resolve()), "MAIN_IMAGE_NAME": "hb__check"}
    if image:
        variables["PREBUILT_IMAGE_NAME"] = image
    try:
        load_project(environment_dir, variables=variables, main_environment=env, prebuilt=bool(image))
    except ComposeError as error:
        raise TaskEnvironmentError(str(error)) from None


def _check_features(choice: EnvironmentChoice, task_dir: Path) -> None:
    try:
        config = TaskConfig.model_validate(_task_toml(task_dir))
    except ValidationError:
        return  # check_ceilings read the same file first and says what is wrong with it
    reasons = unsupported_features(
        config, choice.kind, runs_separate_verifier=choice.traits.runs_separate_verifier
    )
    if reasons:
        raise TaskEnvironmentError("; ".join(reasons))


def check_task_environment(choice: EnvironmentChoice, task_dir: Path) -> EnvironmentFidelity:
    """Whether the environment the task declares is the one it gets; TaskEnvironmentError when the task
    cannot run in the chosen environment at all."""
    if choice.kind in OWN_ENVIRONMENTS or choice.traits.runs_on_host:
        _check_features(choice, task_dir)
    compose = task_dir / "environment" / COMPOSE_FILE_NAME
    traits = choice.traits
    if compose.exists() and not traits.runs_compose:
        raise TaskEnvironmentError(
            f"environment/{COMPOSE_FILE_NAME}: this task runs sidecar services with Docker Compose, which "
            f"the {choice.kind!r} environment does not run; configure the container environment "
            "(REGATTA_EXECUTOR_ENVIRONMENT=container, a Docker engine), Harbor's compose-based one "
            f"(REGATTA_EXECUTOR_ENVIRONMENT={COMPOSE_ENVIRONMENT}) or a cloud sandbox that runs compose files"
        )
    if compose.exists() and traits.checks_compose:
        _check_compose(task_dir)
    if not traits.runs_on_host:
        return EnvironmentFidelity(traits.builds_image, None)
    ignored = unhonoured_instructions(task_dir / "environment" / "Dockerfile")
    image = declared_image(task_dir)
    users = declared_users(task_dir)
    if not ignored and image is None and not users:
        return EnvironmentFidelity(True, None)
    what = []
    if ignored:
        what.append(f"its Dockerfile's {', '.join(ignored)} (environment/Dockerfile)")
    if image is not None:
        what.append(f"its image {image!r} (task.toml)")
    if users:
        what.append(f"its {', '.join(users)} (task.toml; every command ran as the sandbox's root)")
    note = (
        f"The task's environment was not built: the {choice.kind!r} environment ran it on this host's own "
        f"system and ignored {' and '.join(what)}. Its outcome may not be what the task's own environment "
        "gives; use the container environment (a Docker engine) for a faithful run."
    )
    return EnvironmentFidelity(False, note)
