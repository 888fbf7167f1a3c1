"""Each environment declares what it builds, runs and takes (regatta_shared.rules.environment_traits), and the
executor asks it: a class built on `local` or `container` does what its base does, whatever it is named."""

from __future__ import annotations

from pathlib import Path

import pytest
from regatta_executor.attempt.trials import trial_config
from regatta_executor.container.environment import ContainerEnvironment
from regatta_executor.environments.choice import CONTAINER_ENVIRONMENT, EnvironmentChoice
from regatta_executor.local.environment import LocalEnvironment
from regatta_executor.tasks.environment import TaskEnvironmentError, check_task_environment
from regatta_shared.events import AgentSpec, ModelSpec
from regatta_shared.messaging.jobs import AttemptJob
from regatta_shared.rules.environment_traits import FOREIGN

from tests.support.tasks import write_task

FLAKY_LOCAL = "tests.support.flaky_environment:FlakyLocalEnvironment"
JOB = AttemptJob(
    run_id="run_traits",
    attempt_id="att_1",
    agent=AgentSpec(index=0, harness="oracle", model=ModelSpec(type="hosted", base_model="none")),
    task="t",
    task_digest="d",
    attempt_index=0,
)


def test_our_environments_declare_their_traits_and_their_subclasses_inherit_them() -> None:
    assert EnvironmentChoice("local").traits is LocalEnvironment.TRAITS
    assert EnvironmentChoice("container").traits is ContainerEnvironment.TRAITS
    assert EnvironmentChoice(CONTAINER_ENVIRONMENT).traits is ContainerEnvironment.TRAITS
    assert EnvironmentChoice(FLAKY_LOCAL).traits is LocalEnvironment.TRAITS
    assert EnvironmentChoice("docker").traits is FOREIGN
    local, container = LocalEnvironment.TRAITS, ContainerEnvironment.TRAITS
    assert (local.runs_on_host, local.builds_image, local.runs_compose) == (True, False, False)
    assert (container.runs_on_host, container.builds_image, container.runs_compose) == (False, True, True)


@pytest.mark.parametrize("environment", [LocalEnvironment, ContainerEnvironment])
def test_what_harbor_is_told_of_compose_is_what_the_class_runs(environment: type) -> None:
    """Harbor refuses a sidecar's `[[artifacts]]` and `[[verifier.collect]]` unless the environment
    declares `docker_compose`; `container` runs sidecars and serves their per-service operations."""
    capabilities = environment.capabilities.fget(None)  # the property reads nothing of the instance
    assert capabilities.docker_compose is environment.TRAITS.runs_compose


@pytest.mark.parametrize(
    ("kind", "gets_run_id"),
    [
        ("container", True),
        (CONTAINER_ENVIRONMENT, True),
        ("local", False),
        (FLAKY_LOCAL, False),
        ("docker", False),
    ],
)
def test_the_run_id_goes_to_the_environments_that_take_it(
    kind: str, gets_run_id: bool, tmp_path: Path
) -> None:
    config = trial_config(JOB, tmp_path, tmp_path, EnvironmentChoice(kind), {})
    assert ("run_id" in config["environment"]["kwargs"]) is gets_run_id
    if gets_run_id:
        assert config["environment"]["kwargs"]["run_id"] == JOB.run_id


def test_a_compose_task_is_refused_by_what_runs_on_the_host_and_checked_by_the_container_class(
    tmp_path: Path,
) -> None:
    task = write_task(tmp_path, "sidecars")
    (task / "environment" / "docker-compose.yaml").write_text("services:\n  main:\n    privileged: true\n")
    for on_host in ("local", FLAKY_LOCAL):
        with pytest.raises(TaskEnvironmentError, match="Docker Compose"):
            check_task_environment(EnvironmentChoice(on_host), task)
    # The container class, named by its import path, refuses the key before the attempt as `container` does.
    for container in ("container", CONTAINER_ENVIRONMENT):
        with pytest.raises(TaskEnvironmentError, match="privileged"):
            check_task_environment(EnvironmentChoice(container), task)
    # A Harbor environment runs the compose file its own way; Regatta cannot vouch for the build.
    assert check_task_environment(EnvironmentChoice("docker"), task).built is None


class EngineContainer(ContainerEnvironment):
    """A class built on `container`, named by its import path: it needs what `container` needs."""


ENGINE_CONTAINER = f"{__name__}:EngineContainer"


@pytest.mark.parametrize("answers", [False, True])
def test_what_needs_an_engine_is_chosen_by_its_traits_whatever_its_name(
    answers: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`resolve_environment` asks the engine for exactly the environments whose traits need one, and
    `auto` takes the first of AUTO_ORDER whose needs the host meets."""
    from regatta_executor.container import engine
    from regatta_executor.environments import choice as environments

    asked: list[bool] = []

    def engine_answers() -> bool:
        asked.append(True)
        return answers

    monkeypatch.setattr(engine, "engine_answers", engine_answers)
    monkeypatch.setattr(environments, "_root_is_remapped", lambda kwargs: True)
    assert EnvironmentChoice(ENGINE_CONTAINER).traits.needs_engine
    for name in ("container", ENGINE_CONTAINER):
        reason = environments.resolve_environment(name).reason
        assert ("no Docker engine answers" in reason) is not answers, name
    for name in ("local", FLAKY_LOCAL, "daytona"):
        asked.clear()
        assert environments.resolve_environment(name).reason == "as configured", name
        assert asked == [], name
    chosen = environments.resolve_environment("auto").choice
    assert chosen.traits.needs_engine is answers
    assert chosen.traits.builds_image is answers
