"""Re-run errored attempts (issue 28), the gateway's part: `POST /api/v1/runs/{key}/rerun-errored` records
one ErroredAttemptsRerunRequested for exactly the errored attempts of a finished run, and the read model
runs the run again; a run that is not finished or has no errored attempt is refused (409) and nothing is
recorded. Which attempts run again and which runs are refused are rules of `commands/rerun.py`, tested
on the service layer; the run page's button (a web page) and the route's 202/409 stay on HTTP. The
run-scheduler's part is in tests/integration/test_run_scheduler.py, the whole loop through the running
stack in tests/e2e/test_web_ui_rerun_errored.py."""

from __future__ import annotations

from typing import Any

from regatta_gateway.commands import rerun as rerun_commands
from regatta_gateway.commands import runs as run_commands
from regatta_gateway.errors import Conflict, NotFound
from regatta_scoring.scorer import Scorer
from regatta_shared.events import (
    AttemptFinished,
    AttemptScheduled,
    RunExecutionCompleted,
    RunQueued,
    RunStarted,
)
from regatta_shared.events.envelope import new_event
from regatta_shared.eventstore import EventStore
from regatta_shared.ids import attempt_id, run_stream
from regatta_shared.rules.task_defects import TASK_DEFECT

from .conftest import ADMIN_TOKEN, Gateway, demo_config
from .service_support import Services, refused


def _finish_with_errors(
    store: EventStore, run_id: str, errored_tasks: set[str], defects: frozenset[str] = frozenset()
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
    stored = store.append(run_stream(run_id), [new_event(e, actor="run-scheduler") for e in events])
    scorer = Scorer(store)
    scorer.on_event(stored[-1])


def _rerun(sv: Services, run_id: str) -> dict[str, object]:
    accepted = rerun_commands.rerun_errored(sv.store, sv.scope(), run_id)
    sv.settle()
    return accepted


def _refused(sv: Services, run_id: str, message: str) -> None:
    before = sv.event_count()
    refusal = refused(lambda: _rerun(sv, run_id), Conflict)
    assert message in refusal.message, refusal.message
    assert sv.event_count() == before, "a refused re-run records nothing"


def test_a_finished_run_reruns_exactly_its_errored_attempts(services: Services) -> None:
    sv = services
    sv.benchmark("demo", ["t1", "t2"])
    run_id = sv.submit(demo_config())["id"]
    _finish_with_errors(sv.store, run_id, {"t2"})
    sv.settle()
    detail = sv.run(run_id)
    assert detail["benchmark_run"]["status"] == "finished"
    assert detail["totals"]["errored"] == 1

    accepted = _rerun(sv, run_id)
    assert accepted == {"id": run_id, "status": "running", "rerun": 1, "attempts": 1}
    (requested,) = [
        e for e in sv.store.read_stream(run_stream(run_id)) if e.type == "ErroredAttemptsRerunRequested"
    ]
    assert requested.data["attempt_ids"] == [attempt_id(run_id, 0, "t2", 0)]
    assert requested.actor  # the user who asked, as for every command

    assert sv.run(run_id)["benchmark_run"]["status"] == "running"
    attempts = sv.attempts(run_id)["attempts"]
    assert sorted((a["agent_index"], a["task"]) for a in attempts) == [(0, "t1"), (1, "t1"), (1, "t2")], (
        "the errored attempt's row waits for its new scheduling; the others stay"
    )
    (run_row,) = [r for r in sv.raw_rows("rm_runs") if r["id"] == run_id]
    assert (run_row["ingested"], run_row["expected"], run_row["completed_at"]) == (4, 5, None)

    # While it re-runs, a second request is refused: the run is not finished.
    _refused(sv, run_id, "the run is running its last re-run")


def test_a_run_not_finished_or_without_errored_attempts_is_refused(services: Services) -> None:
    sv = services
    sv.benchmark("demo", ["t1", "t2"])
    pending = sv.submit(demo_config())["id"]
    _refused(sv, pending, "the run is pending: only a finished run's errored attempts can be re-run")
    clean = sv.submit(demo_config())["id"]
    sv.progress(clean)
    assert sv.run(clean)["benchmark_run"]["status"] == "finished"
    _refused(sv, clean, "the run has no errored attempts: there is nothing to re-run")
    stopped = sv.submit(demo_config())["id"]
    run_commands.stop_run(sv.store, sv.scope(), stopped)
    sv.settle()
    _refused(sv, stopped, "only a finished run's errored attempts can be re-run")
    refused(lambda: _rerun(sv, "no-such-run"), NotFound)


def test_a_task_defect_is_never_offered_for_a_rerun(services: Services) -> None:
    """A task's own defect fails the same way on every try (issue 38): only the other errored attempts
    run again, and a run whose only errors are task defects is refused."""
    sv = services
    sv.benchmark("demo", ["t1", "t2"])
    mixed = sv.submit(demo_config())["id"]
    _finish_with_errors(sv.store, mixed, {"t1", "t2"}, defects=frozenset({"t1"}))
    sv.settle()
    assert sv.run(mixed)["totals"]["errored"] == 2
    assert _rerun(sv, mixed)["attempts"] == 1
    (requested,) = [
        e for e in sv.store.read_stream(run_stream(mixed)) if e.type == "ErroredAttemptsRerunRequested"
    ]
    assert requested.data["attempt_ids"] == [attempt_id(mixed, 0, "t2", 0)]

    only_defects = sv.submit(demo_config())["id"]
    _finish_with_errors(sv.store, only_defects, {"t1"}, defects=frozenset({"t1"}))
    sv.settle()
    _refused(sv, only_defects, "the run's errored attempts are task defects")


def test_the_run_page_offers_the_rerun_of_errored_attempts_but_never_of_task_defects(
    gateway: Gateway,
) -> None:
    """The page's button counts what the command would run again (task defects left out), and the
    route answers 202 to a re-run and 409 to a refused one."""
    gw = gateway
    gw.benchmark("demo", ["t1", "t2"])
    mixed = gw.submit(demo_config())["id"]
    _finish_with_errors(gw.store, mixed, {"t1", "t2"}, defects=frozenset({"t1"}))
    gw.settle()
    page = gw.client.get(f"/benchmarks/runs/{mixed}", cookies={"regatta_token": ADMIN_TOKEN})
    assert 'data-testid="rerun-errored"' in page.text and "Run the 1 errored attempt again" in page.text
    assert gw.ok(gw.v1("POST", f"/runs/{mixed}/rerun-errored"), 202)["attempts"] == 1

    only_defects = gw.submit(demo_config())["id"]
    _finish_with_errors(gw.store, only_defects, {"t1"}, defects=frozenset({"t1"}))
    gw.settle()
    page = gw.client.get(f"/benchmarks/runs/{only_defects}", cookies={"regatta_token": ADMIN_TOKEN})
    assert 'data-testid="rerun-errored"' not in page.text
    refusal = gw.v1("POST", f"/runs/{only_defects}/rerun-errored")
    assert refusal.status_code == 409 and "task defects" in refusal.json()["message"], refusal.text
