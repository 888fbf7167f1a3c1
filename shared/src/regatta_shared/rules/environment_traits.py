"""What an environment does with a task (what it builds, where it runs it, what it takes from the
deployment), as the environment class declares it (`TRAITS`). The executor asks an environment's traits
instead of comparing its name: a class built on `local` or `container` inherits what it does. In the
kernel, so that `regatta up` (which may not import the executor) reads the same facts when it decides
whether choosing the executors' environment needs to ask an engine."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EnvironmentTraits:
    # Whether the task's own environment is built (its Dockerfile or image): True, False, or None when
    # Regatta cannot vouch for it (a Harbor or third-party environment).
    builds_image: bool | None
    # Whether the task runs on this host's own system: its Dockerfile, image and `user` are then ignored,
    # and an attempt records which of them were (task_environment.py).
    runs_on_host: bool
    # Whether it runs a task's docker-compose.yaml (sidecar services).
    runs_compose: bool
    # Whether a compose task is checked by Regatta's own compose loader (compose/project.py) before
    # the attempt, so a key it refuses errors the attempt once instead of on every retry.
    checks_compose: bool
    # Whether it takes the attempt's run id, to build a failing image once per run
    # (container/image/build_failures.py).
    takes_run_id: bool
    # Whether it takes the deployment's local images and outbound policy (REGATTA_LOCAL_IMAGES,
    # REGATTA_OUTBOUND_ALLOW) as kwargs.
    takes_deployment_policy: bool
    # Whether the agent's log folder is this host's while the agent runs (bind-mounted), so the live
    # view follows its files (live_output.py); otherwise it streams the agent's commands' output as they
    # print it (Harbor's output callbacks), the folder's files come when the attempt ends, and, where
    # `reads_logs_while_watched`, from the sandbox while someone watches.
    agent_logs_on_host: bool = False
    # Whether, the folder being elsewhere, it reads its agent's and verifier's log folders for the live
    # view while someone watches (live_sources.SandboxLogs: the container's, one engine round trip a read).
    reads_logs_while_watched: bool = False
    # Whether it runs Harbor's `separate` verifier mode (a container of the verifier's own).
    runs_separate_verifier: bool = False
    # Whether it takes the run's verifier-integrity policy (`record` or `enforce`) as a kwarg.
    takes_verifier_policy: bool = False
    # Whether it runs attempts on the Docker engine DOCKER_HOST names, which must answer and remap root
    # (environments.py asks it at start; `auto` takes such an environment only when it does).
    needs_engine: bool = False


# A Harbor environment type (docker, daytona, modal, …) or a class that declares nothing: it builds and
# runs the task its own way, compose files included, and takes none of Regatta's kwargs.
FOREIGN = EnvironmentTraits(
    builds_image=None,
    runs_on_host=False,
    runs_compose=True,
    checks_compose=False,
    takes_run_id=False,
    takes_deployment_policy=False,
)

# Our own environments' traits, the `TRAITS` of their classes (local/environment.py,
# container/environment.py), declared here so that choosing an environment (the executor's
# environments/choice.py, `regatta up`) reads them without importing the classes, whose imports cost seconds
# at every `regatta up`.
LOCAL = EnvironmentTraits(
    builds_image=False,
    runs_on_host=True,
    runs_compose=False,
    checks_compose=False,
    takes_run_id=False,
    takes_deployment_policy=False,
    agent_logs_on_host=True,
    takes_verifier_policy=True,
)
CONTAINER = EnvironmentTraits(
    builds_image=True,
    runs_on_host=False,
    runs_compose=True,
    checks_compose=True,
    takes_run_id=True,
    takes_deployment_policy=True,
    takes_verifier_policy=True,
    runs_separate_verifier=True,
    reads_logs_while_watched=True,
    needs_engine=True,
)

# Our own environments by name, with the names that mean the same one; `auto` picks one at start.
OWN_TRAITS = {"local": LOCAL, "container": CONTAINER}
ALIASES = {"docker-sdk": "container"}
AUTO = "auto"


def own_traits(name: str) -> EnvironmentTraits | None:
    """The traits of the own environment a configured name means (aliases and spaces allowed), or None
    for `auto` and every other environment."""
    name = name.strip()
    return OWN_TRAITS.get(ALIASES.get(name, name))
