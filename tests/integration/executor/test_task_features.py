"""Issue 26: Harbor task features one of Regatta's own environments does not provide (a verifier in a
container of its own under `local`, GPUs under both) are refused before anything of the attempt is made,
naming the task.toml field and the reason; `container` runs a separate verifier (issue 36); Harbor's own
environment types decide for themselves."""

from __future__ import annotations

from pathlib import Path

import pytest
from regatta_executor.environments.choice import EnvironmentChoice
from regatta_executor.tasks.environment import TaskEnvironmentError, check_task_environment

from tests.support.tasks import write_task

OURS = ("container", "local", "tests.support.flaky_environment:FlakyLocalEnvironment")
WITHOUT_SEPARATE = ("local", "tests.support.flaky_environment:FlakyLocalEnvironment")


def _with(task: Path, section: str, lines: str) -> Path:
    toml = task / "task.toml"
    text = toml.read_text()
    assert f"{section}\n" in text, text
    toml.write_text(text.replace(f"{section}\n", f"{section}\n{lines}\n", 1))
    return task


def _refusal(kind: str, task: Path) -> str:
    with pytest.raises(TaskEnvironmentError) as refused:
        check_task_environment(EnvironmentChoice(kind), task)
    return str(refused.value)


@pytest.mark.parametrize("kind", WITHOUT_SEPARATE)
def test_a_separate_verifier_is_refused_naming_environment_mode(kind: str, tmp_path: Path) -> None:
    task = _with(write_task(tmp_path, "separate"), "[verifier]", 'environment_mode = "separate"')
    said = _refusal(kind, task)
    assert said.startswith("task.toml [verifier] environment_mode = 'separate': "), said
    assert f"which the {kind!r} environment does not make" in said
    assert "REGATTA_EXECUTOR_ENVIRONMENT=container" in said
    # `shared`, said or left out, runs as before.
    _with(write_task(tmp_path, "shared"), "[verifier]", 'environment_mode = "shared"')
    assert check_task_environment(EnvironmentChoice(kind), tmp_path / "shared").built is not None
    assert check_task_environment(EnvironmentChoice(kind), write_task(tmp_path, "plain")).built is not None


def test_the_container_environment_runs_a_separate_verifier(tmp_path: Path) -> None:
    task = _with(write_task(tmp_path, "separate"), "[verifier]", 'environment_mode = "separate"')
    assert check_task_environment(EnvironmentChoice("container"), task).built is True


@pytest.mark.parametrize("kind", WITHOUT_SEPARATE)
def test_a_verifier_environment_implies_separate_and_is_refused(kind: str, tmp_path: Path) -> None:
    task = write_task(tmp_path, "implied")
    (task / "task.toml").write_text(
        (task / "task.toml").read_text() + '[verifier.environment]\ndocker_image = "debian:bookworm"\n'
    )
    said = _refusal(kind, task)
    assert "[verifier] environment_mode ('separate', implied by its [verifier.environment])" in said, said


def test_harbors_own_environment_types_decide_for_themselves(tmp_path: Path) -> None:
    task = _with(write_task(tmp_path, "separate"), "[verifier]", 'environment_mode = "separate"')
    _with(task, "[environment]", "gpus = 1")
    # Harbor's docker environment runs a separate verifier; GPU-capable types allocate GPUs.
    assert check_task_environment(EnvironmentChoice("docker"), task).built is None


@pytest.mark.parametrize("kind", OURS)
def test_a_task_asking_for_gpus_is_refused_naming_the_field(kind: str, tmp_path: Path) -> None:
    task = _with(write_task(tmp_path, "gpu"), "[environment]", 'gpus = 1\ngpu_types = ["H100"]')
    said = _refusal(kind, task)
    assert said.startswith("task.toml [environment] gpus = 1: "), said
    assert f"the {kind!r} environment of this executor allocates no GPUs" in said
    # gpus = 0 asks for none.
    _with(write_task(tmp_path, "nogpu"), "[environment]", "gpus = 0")
    assert check_task_environment(EnvironmentChoice(kind), tmp_path / "nogpu").built is not None


def test_both_refusals_are_given_at_once(tmp_path: Path) -> None:
    task = _with(write_task(tmp_path, "both"), "[verifier]", 'environment_mode = "separate"')
    _with(task, "[environment]", "gpus = 2")
    said = _refusal("local", task)
    assert "[verifier] environment_mode = 'separate'" in said and "[environment] gpus = 2" in said, said


def test_the_refusal_comes_before_any_compose_file_is_read(tmp_path: Path) -> None:
    """A separate-verifier compose task is refused for the verifier, the reason that stays true
    whatever its compose file says."""
    task = _with(write_task(tmp_path, "compose"), "[verifier]", 'environment_mode = "separate"')
    (task / "environment" / "docker-compose.yaml").write_text("services:\n  main: {build: .}\n")
    assert "environment_mode = 'separate'" in _refusal("local", task)


def test_the_executors_check_takes_an_absolute_dockerfile_inside_the_context_only(tmp_path: Path) -> None:
    """The check an attempt passes before anything is made fills ${CONTEXT_DIR} as Harbor does: the
    task's own `${CONTEXT_DIR}/Dockerfile` passes, a host file named the same way errors the attempt
    once, naming where the path leads."""
    compose = "services:\n  main:\n    build:\n      context: ${CONTEXT_DIR}/..\n      dockerfile: %s\n"
    task = write_task(tmp_path, "absolute")
    (task / "environment" / "docker-compose.yaml").write_text(compose % "${CONTEXT_DIR}/Dockerfile")
    assert check_task_environment(EnvironmentChoice("container"), task).built is not None

    (task / "environment" / "docker-compose.yaml").write_text(compose % "${CONTEXT_DIR}/../../../etc/passwd")
    said = _refusal("container", task)
    assert said.startswith("environment/docker-compose.yaml: services.main.build.dockerfile "), said
    assert f"resolves to {tmp_path.resolve().parent / 'etc' / 'passwd'}, outside the build context" in said
