"""Which environment runs the attempts: named once, checked and resolved when the executor starts.

`REGATTA_EXECUTOR_ENVIRONMENT` names it: `local` (ours, bubblewrap on this host), `container` (ours, one
container per attempt on a Docker engine; `docker-sdk` is the same), `auto` (`container` when a Docker
engine answers, else `local`), any Harbor environment type (`docker`, `daytona`, `modal`, …), or any
Harbor environment class as `module:Class`. A name that is none of these stops the executor at start:
checked per attempt it would fail every attempt the same way, and be retried without end.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from regatta_shared.rules.environment_traits import ALIASES, AUTO, FOREIGN, OWN_TRAITS, EnvironmentTraits

LOCAL_ENVIRONMENT = "regatta_executor.local.environment:LocalEnvironment"
CONTAINER_ENVIRONMENT = "regatta_executor.container.environment:ContainerEnvironment"
OWN_ENVIRONMENTS = {"local": LOCAL_ENVIRONMENT, "container": CONTAINER_ENVIRONMENT}
# What `auto` takes, in this order: the first one this host can run (an environment that needs a Docker
# engine, only when the engine answers and remaps root). The one that builds the task's image comes first.
AUTO_ORDER = ("container", "local")
# Harbor's environment that runs a task's docker-compose.yaml (it shells out to `docker compose`).
COMPOSE_ENVIRONMENT = "docker"
_IMPORT_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")
MAX_NAME = 300


class EnvironmentNameError(ValueError):
    """The configured environment cannot run anything: the executor must not start."""


@dataclass(frozen=True)
class EnvironmentChoice:
    """`local` and `container` are ours; `module:Class` is any BaseEnvironment by import path; any other
    name is a Harbor environment type (docker, podman, daytona, modal, e2b, …). One code path for all."""

    kind: str = "local"
    kwargs: dict[str, Any] = field(default_factory=dict)

    def harbor_config(self) -> dict[str, Any]:
        if self.kind in OWN_ENVIRONMENTS:
            return {"import_path": OWN_ENVIRONMENTS[self.kind], "delete": True, "kwargs": dict(self.kwargs)}
        if ":" in self.kind:
            return {"import_path": self.kind, "delete": True, "kwargs": dict(self.kwargs)}
        return {"type": self.kind, "delete": True, "kwargs": dict(self.kwargs)}

    @property
    def traits(self) -> EnvironmentTraits:
        """What the environment builds, runs and takes, as its class declares it
        (regatta_shared.rules.environment_traits)."""
        return _traits(self.kind)


@dataclass(frozen=True)
class ResolvedEnvironment:
    choice: EnvironmentChoice
    reason: str  # why this one: shown at start (log, `regatta up`)


def harbor_types() -> list[str]:
    from harbor.models.environment_type import EnvironmentType

    return [member.value for member in EnvironmentType]


def valid_names() -> str:
    return (
        f"local, container (or docker-sdk), {AUTO}, one of Harbor's environment types "
        f"({', '.join(harbor_types())}), or a Harbor environment class as module:Class"
    )


def installed(kind: str) -> bool:
    """Whether one of our environments can load here (a build may leave the container package out)."""
    module = OWN_ENVIRONMENTS.get(kind, kind).split(":", 1)[0]
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


def container_environment_installed() -> bool:
    return installed("container")


def docker_host() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


@functools.cache
def _traits(kind: str) -> EnvironmentTraits:
    """Our own environments and any class by import path declare their traits (a class built on ours
    inherits them); a Harbor environment type declares none."""
    if kind in OWN_TRAITS:
        return OWN_TRAITS[kind]
    import_path = kind
    if ":" not in import_path:
        return FOREIGN
    traits = getattr(_load_class(import_path), "TRAITS", None)
    return traits if isinstance(traits, EnvironmentTraits) else FOREIGN


def _load_class(import_path: str) -> object:
    module_name, _, class_name = import_path.partition(":")
    return getattr(importlib.import_module(module_name), class_name)


def parse_kwargs(text: str) -> dict[str, Any]:
    try:
        kwargs = json.loads(text or "{}")
    except json.JSONDecodeError as error:
        raise EnvironmentNameError(f"REGATTA_EXECUTOR_ENVIRONMENT_KWARGS is not JSON: {error}") from None
    if not isinstance(kwargs, dict):
        raise EnvironmentNameError("REGATTA_EXECUTOR_ENVIRONMENT_KWARGS must be a JSON object")
    return kwargs


def check_name(name: str) -> str:
    """The canonical name of a configured environment, or EnvironmentNameError naming the valid ones."""
    name = name.strip()
    canonical = ALIASES.get(name, name)
    if canonical in OWN_ENVIRONMENTS and not installed(canonical):
        raise EnvironmentNameError(
            f"REGATTA_EXECUTOR_ENVIRONMENT={name!r}: the {canonical} environment is not installed in this "
            f"build ({OWN_ENVIRONMENTS[canonical]}). Valid: {valid_names()}"
        )
    if canonical in OWN_ENVIRONMENTS or canonical == AUTO or canonical in harbor_types():
        return canonical
    shown = name if len(name) <= MAX_NAME else name[:MAX_NAME] + "…"
    if ":" in name and len(name) <= MAX_NAME and _IMPORT_PATH.match(name):
        try:
            cls = _load_class(name)
        except Exception as error:  # any failure to import is the same misconfiguration
            raise EnvironmentNameError(
                f"REGATTA_EXECUTOR_ENVIRONMENT={shown!r}: cannot load that class ({type(error).__name__}: "
                f"{error}). Valid: {valid_names()}"
            ) from None
        if not isinstance(cls, type):
            raise EnvironmentNameError(f"REGATTA_EXECUTOR_ENVIRONMENT={shown!r} is not a class")
        return name
    raise EnvironmentNameError(
        f"REGATTA_EXECUTOR_ENVIRONMENT={shown!r} is not an environment. Valid: {valid_names()}"
    )


def resolve_environment(name: str, kwargs_json: str = "{}") -> ResolvedEnvironment:
    """The environment the executor uses for every attempt, decided once. One that needs a Docker engine
    (its traits say so) is asked whether the engine DOCKER_HOST (or the default socket) points at answers
    and remaps root: a named one is taken anyway (its attempts error until it does), `auto` takes the
    first of AUTO_ORDER the host runs."""
    canonical = check_name(name)
    kwargs = parse_kwargs(kwargs_json)
    if canonical != AUTO:
        choice = EnvironmentChoice(canonical, kwargs)
        problem = _engine_problem(kwargs) if choice.traits.needs_engine else None
        return ResolvedEnvironment(choice, "as configured" + (f"; {problem}" if problem else ""))
    passed_over = ""
    for kind in AUTO_ORDER:
        if not installed(kind):
            passed_over = f"the {kind} environment is not installed"
            continue
        choice = EnvironmentChoice(kind, kwargs)
        problem = _engine_problem(kwargs, auto=True) if choice.traits.needs_engine else None
        if problem is not None:
            passed_over = problem
            continue
        if choice.traits.needs_engine:
            return ResolvedEnvironment(choice, f"auto: a Docker engine answered at {docker_host()}")
        why = f"auto: {passed_over}" if passed_over else "auto"
        not_built = "" if choice.traits.builds_image else "; task Dockerfiles are not built"
        return ResolvedEnvironment(choice, why + not_built)
    raise EnvironmentNameError(f"auto: no environment runs on this host ({passed_over})")


def _engine_problem(kwargs: dict[str, Any], auto: bool = False) -> str | None:
    """Why the Docker engine at DOCKER_HOST cannot run attempts yet, or None when it can."""
    from ..container.engine import engine_answers

    host = docker_host()
    if not engine_answers():
        if auto:
            return f"no Docker engine answered at {host}"
        return f"no Docker engine answers at {host} yet: attempts error until one does"
    if not _root_is_remapped(kwargs):
        if auto:
            return (
                f"the Docker engine at {host} runs containers as the host's root (no userns-remap, "
                "docs/deployment.md)"
            )
        return (
            f"the Docker engine at {host} runs containers as the host's root (no userns-remap): attempts "
            "error until it remaps user namespaces (docs/deployment.md)"
        )
    return None


def _root_is_remapped(kwargs: dict[str, Any]) -> bool:
    """Whether the container environment would run here: the engine remaps root, or the operator
    accepted host root (`allow_host_root`, every task trusted)."""
    from ..container.engine import client
    from ..container.hardening import engine_root

    if kwargs.get("allow_host_root") is True:
        return True
    try:
        return engine_root(client()).remapped
    except Exception:  # an engine that stops answering here is reported by the attempts themselves
        return True
