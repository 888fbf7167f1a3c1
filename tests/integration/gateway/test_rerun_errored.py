"""Re-run errored attempts (issue 28), the gateway's part: `POST /api/v1/runs/{key}/rerun-errored` records
one ErroredAttemptsRerunRequested for exactly the errored attempts of a finished run, and the read model
runs the run again; a run that is not finished or has no errored attempt is refused (409) and nothing is
recorded. The run-scheduler's part is in tests/integration/test_run_scheduler.py, the whole loop through
the running stack in tests/e2e/test_web_ui_rerun_errored.py."""

from __future__ import annotations

from typing import Any

from regatta_scoring.scorer import Scorer
from regatta_shared.events import (
    AttemptFinished,
    AttemptScheduled,
    RunExecutionCompleted,
    RunQueued,
    RunStarted,
)
from regatta_shared.events.envelope import new_event
from regatta_shared.ids import attempt_id, run_stream
from regatta_shared.rules.task_defects import TASK_DEFECT

from .conftest import ADMIN_TOKEN, Gateway, demo_config


def _finish_with_errors(
    gw: Gateway, run_id: str, errored_tasks: set[str], defects: frozenset[str] = frozenset()
) -> None:
    """Record a run as the scheduler, executors and scoring would: agent 0 errors on `errored_tasks`
    (an infrastructure fault, or a task defect on the tasks in `defects`), every other attempt passes."""
    events: list[Any] = [RunQueued(run_id=run_id, expected_attempts=4), RunStarted(run_id=run_id)]
    for agent in (0, 1):
        for task in ("t1", "t2"):
            aid = attempt_id(run_id, agent, task, 0)
            errored = agent == 0 and task in errored_tasks
            events += [
                AttemptScheduled(
                    run_id=run_id, attempt_id=aid, agent_index=agent, task=task, attempt_index=0
                ),
                AttemptFinished(
                    run_id=run_id,
                    attempt_id=aid,
                    agent_index=agent,
                    task=task,
                    attempt_index=0,
                    try_number=1,
                    outcome="errored" if errored else "passed",
                    exception_type=(TASK_DEFECT if task in defects else "SandboxBuildFailedError")
                    if errored
                    else None,
                    exception_message="injected" if errored else None,
                    rewards=None if errored else {"reward": 1.0},
                ),
            ]
    events.append(RunExecutionCompleted(run_id=run_id))
    stored = gw.store.append(run_stream(run_id), [new_event(e, actor="run-scheduler") for e in events])
    scorer = Scorer(gw.store)
    scorer.on_event(stored[-1])
    gw.settle()


def _refused(gw: Gateway, run_id: str, message: str) -> None:
    before = gw.event_count()
    response = gw.v1("POST", f"/runs/{run_id}/rerun-errored")
    assert response.status_code == 409, response.text
    assert message in response.text, response.text
    assert gw.event_count() == before, "a refused re-run records nothing"


def test_a_finished_run_reruns_exactly_its_errored_attempts(gateway: Gateway) -> None:
    gw = gateway
    gw.benchmark("demo", ["t1", "t2"])
    run_id = gw.submit(demo_config())["id"]
    _finish_with_errors(gw, run_id, {"t2"})
    detail = gw.ok(gw.v1("GET", f"/runs/{run_id}"))
    assert detail["benchmark_run"]["status"] == "finished"
    assert detail["totals"]["errored"] == 1

    accepted = gw.ok(gw.v1("POST", f"/runs/{run_id}/rerun-errored"), 202)
    assert accepted == {"id": run_id, "status": "running", "rerun": 1, "attempts": 1}
    (requested,) = [
        e for e in gw.store.read_stream(run_stream(run_id)) if e.type == "ErroredAttemptsRerunRequested"
    ]
    assert requested.data["attempt_ids"] == [attempt_id(run_id, 0, "t2", 0)]
    assert requested.actor  # the user who asked, as for every command

    detail = gw.ok(gw.v1("GET", f"/runs/{run_id}"))
    assert detail["benchmark_run"]["status"] == "running"
    attempts = gw.ok(gw.v1("GET", f"/runs/{run_id}/attempts"))["attempts"]
    assert sorted((a["agent_index"], a["task"]) for a in attempts) == [(0, "t1"), (1, "t1"), (1, "t2")], (
        "the errored attempt's row waits for its new scheduling; the others stay"
    )
    (run_row,) = [r for r in gw.raw_rows("rm_runs") if r["id"] == run_id]
    assert (run_row["ingested"], run_row["expected"], run_row["completed_at"]) == (4, 5, None)

    # While it re-runs, a second request is refused: the run is not finished.
    _refused(gw, run_id, "the run is running its last re-run")


def test_a_run_not_finished_or_without_errored_attempts_is_refused(gateway: Gateway) -> None:
    gw = gateway
    gw.benchmark("demo", ["t1", "t2"])
    pending = gw.submit(demo_config())["id"]
    _refused(gw, pending, "the run is pending: only a finished run's errored attempts can be re-run")
    clean = gw.submit(demo_config())["id"]
    gw.progress(clean)
    assert gw.ok(gw.v1("GET", f"/runs/{clean}"))["benchmark_run"]["status"] == "finished"
    _refused(gw, clean, "the run has no errored attempts: there is nothing to re-run")
    stopped = gw.submit(demo_config())["id"]
    gw.ok(gw.v1("POST", f"/runs/{stopped}/stop"), 202)
    _refused(gw, stopped, "only a finished run's errored attempts can be re-run")
    response = gw.v1("POST", "/runs/no-such-run/rerun-errored")
    assert response.status_code == 404, response.text


def test_a_task_defect_is_never_offered_for_a_rerun(gateway: Gateway) -> None:
    """A task's own defect fails the same way on every try (issue 38): only the other errored attempts
    run again, and a run whose only errors are task defects is refused."""
    gw = gateway
    gw.benchmark("demo", ["t1", "t2"])
    mixed = gw.submit(demo_config())["id"]
    _finish_with_errors(gw, mixed, {"t1", "t2"}, defects=frozenset({"t1"}))
    assert gw.ok(gw.v1("GET", f"/runs/{mixed}"))["totals"]["errored"] == 2
    page = gw.client.get(f"/benchmarks/runs/{mixed}", cookies={"regatta_token": ADMIN_TOKEN})
    assert 'data-testid="rerun-errored"' in page.text and "Run the 1 errored attempt again" in page.text
    accepted = gw.ok(gw.v1("POST", f"/runs/{mixed}/rerun-errored"), 202)
    assert accepted["attempts"] == 1
    (requested,) = [
        e for e in gw.store.read_stream(run_stream(mixed)) if e.type == "ErroredAttemptsRerunRequested"
    ]
    assert requested.data["attempt_ids"] == [attempt_id(mixed, 0, "t2", 0)]

    only_defects = gw.submit(demo_config())["id"]
    _finish_with_errors(gw, only_defects, {"t1"}, defects=frozenset({"t1"}))
    page = gw.client.get(f"/benchmarks/runs/{only_defects}", cookies={"regatta_token": ADMIN_TOKEN})
    assert 'data-testid="rerun-errored"' not in page.text
    _refused(gw, only_defects, "the run's errored attempts are task defects")
