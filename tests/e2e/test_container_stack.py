"""The container environment on the running stack: a stop removes the run's containers, and an executor
killed mid-attempt leaves no container behind once it is restarted, every attempt recorded once."""

from __future__ import annotations

import json
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from regatta_executor.container.engine import CONTAINER_ENVIRONMENT, LABEL_OWNERS, engine_answers
from regatta_executor.container.janitor import owners_label

from tests.conftest import unavailable
from tests.e2e.test_executor import add_folder, run_events
from tests.integration.container_support import images_built_are_removed
from tests.support.tasks import run_toml, write_task, write_tasks

pytestmark = pytest.mark.timeout(400)


@pytest.fixture
def engine() -> docker.DockerClient:
    if not engine_answers():
        unavailable("no Docker engine answers (scripts/services.sh starts one)")
    return docker.from_env()


@pytest.fixture(autouse=True)
def _built_images_removed(tmp_path: Path) -> Iterator[None]:
    with images_built_are_removed(tmp_path):
        yield


def container_stack(make_stack, tmp_path: Path, **env: str):
    state = tmp_path / "container-state"
    stack = make_stack(
        executors=1,
        REGATTA_EXECUTOR_ENVIRONMENT=CONTAINER_ENVIRONMENT,
        REGATTA_EXECUTOR_ENVIRONMENT_KWARGS=json.dumps({"state_dir": str(state)}),
        HARBOR_TELEMETRY="0",
        **env,
    )
    return stack, owners_label(state / "owners")


def containers(engine: docker.DockerClient, owners: str) -> list[dict]:
    return engine.api.containers(all=True, filters={"label": f"{LABEL_OWNERS}={owners}"})


def test_stop_during_a_run_removes_its_containers(engine, make_stack, api_for, tmp_path) -> None:
    stack, owners = container_stack(make_stack, tmp_path)
    api = api_for(stack)
    add_folder(api, write_tasks(tmp_path / "tasks", 3, prefix="slow", sleep=300), "slow")
    run_id = api.submit_toml(run_toml("slow", concurrency=3))["id"]
    api.wait_for(lambda: len(containers(engine, owners)) == 3, timeout=120)
    assert api.http.post(f"/api/v1/runs/{run_id}/stop").status_code == 202
    detail = api.wait_run(run_id, timeout=90)
    assert detail["benchmark_run"]["status"] == "stopped"
    assert containers(engine, owners) == [], "every container was removed before the run became stopped"


def test_killed_executor_leaves_no_container_and_each_attempt_is_recorded_once(
    engine, make_stack, api_for, tmp_path
) -> None:
    stack, owners = container_stack(make_stack, tmp_path, REGATTA_JOB_ACK_WAIT="3")
    api = api_for(stack)
    add_folder(api, write_tasks(tmp_path / "tasks", 4, prefix="work", sleep=5), "work")
    run_id = api.submit_toml(run_toml("work", concurrency=4))["id"]
    api.wait_for(lambda: len(containers(engine, owners)) >= 2, timeout=120)
    killed = {c["Id"] for c in containers(engine, owners)}

    stack.kill("executor-1", signal.SIGKILL)
    assert killed <= {c["Id"] for c in containers(engine, owners)}, "SIGKILL cleans nothing up"
    stack.restart("executor-1")

    detail = api.wait_run(run_id, timeout=300)
    assert detail["benchmark_run"]["status"] == "finished"
    assert detail["totals"]["passed"] == 4
    finished = Counter(d["attempt_id"] for kind, d in run_events(stack, run_id) if kind == "AttemptFinished")
    assert len(finished) == 4 and set(finished.values()) == {1}
    # Swept at the restart; a redelivered copy of an attempt (at-least-once delivery on a loaded host)
    # may still be removing its own container when the run finishes.
    gone = api.wait_for(lambda: containers(engine, owners) == [] or None, timeout=90, every=0.5)
    assert gone, "the killed executor's containers are gone"


def test_a_task_whose_dockerfile_fails_at_a_step_is_a_task_defect_once(
    engine, make_stack, api_for, tmp_path
) -> None:
    """Issue 38 through the executor: `RUN exit 3` ends each attempt of the task once, as a task defect,
    without the platform's infrastructure retries; the run's other task is measured, and the run offers
    no re-run of the defect."""
    stack, _ = container_stack(
        make_stack, tmp_path, REGATTA_INFRA_RETRIES="2", REGATTA_RETRY_BASE_DELAY="0.2"
    )
    api = api_for(stack)
    tasks = write_tasks(tmp_path / "tasks", 1, prefix="fine")
    broken = write_task(tasks, "broken")
    (broken / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nRUN exit 3\n")
    add_folder(api, tasks, "defects")
    run_id = api.submit_toml(run_toml("defects", attempts=2, concurrency=1))["id"]

    detail = api.wait_run(run_id, timeout=300)
    assert detail["benchmark_run"]["status"] == "finished", detail["benchmark_run"]
    assert (detail["totals"]["passed"], detail["totals"]["errored"]) == (2, 2)
    events = run_events(stack, run_id)
    assert [d for kind, d in events if kind == "AttemptRetried"] == [], "a task defect is never retried"
    defects = [d for kind, d in events if kind == "AttemptFinished" and d["task"] == "broken"]
    assert [(d["outcome"], d["exception_type"], d["try_number"]) for d in defects] == [
        ("errored", "TaskDefectError", 1)
    ] * 2
    assert all(d["exception_message"].startswith("task defect: ") for d in defects)
    assert "returned a non-zero code: 3" in defects[0]["exception_message"]
    rerun = api.http.post(f"/api/v1/runs/{run_id}/rerun-errored")
    assert rerun.status_code == 409 and "task defects" in rerun.text, rerun.text
