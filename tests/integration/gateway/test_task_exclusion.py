"""Excluding a broken task from a benchmark version (issue 38): a workspace admin records
BenchmarkTaskExcluded with a reason; scoring then ranks every run of that version on its remaining tasks
(earlier runs included, so runs scored with and without the task never share a comparison group), and the
leaderboard names the exclusion. Refused to a non-admin (403) and without a reason (400 naming it)."""

from __future__ import annotations

from typing import Any

from regatta_scoring.scorer import Scorer
from regatta_shared.events import (
    AttemptFinished,
    AttemptScheduled,
    BenchmarkTaskExcluded,
    RunExecutionCompleted,
    RunQueued,
    RunStarted,
)
from regatta_shared.events.envelope import new_event
from regatta_shared.ids import attempt_id, benchmark_stream, run_stream
from regatta_shared.rules.task_defects import TASK_DEFECT

from .conftest import ADMIN_TOKEN, Gateway, demo_config

TASKS = ["t1", "t2", "t3"]
REASON = "its Dockerfile pins a package that no longer exists"


def _finish(gw: Gateway, run_id: str, outcomes: dict[tuple[int, str], str]) -> None:
    """Record the run as the scheduler and executors would (one attempt per agent and task, outcome
    `outcomes[(agent, task)]`, a task defect where "defect"), then let the real scorer finish it."""
    agents = sorted({agent for agent, _ in outcomes})
    events: list[Any] = [RunQueued(run_id=run_id, expected_attempts=len(outcomes)), RunStarted(run_id=run_id)]
    for (agent, task), outcome in sorted(outcomes.items()):
        aid = attempt_id(run_id, agent, task, 0)
        defect = outcome == "defect"
        events += [
            AttemptScheduled(run_id=run_id, attempt_id=aid, agent_index=agent, task=task, attempt_index=0),
            AttemptFinished(
                run_id=run_id,
                attempt_id=aid,
                agent_index=agent,
                task=task,
                attempt_index=0,
                try_number=1,
                outcome="errored" if defect else outcome,
                exception_type=TASK_DEFECT if defect else None,
                exception_message="task defect: the Dockerfile does not build" if defect else None,
                rewards=None if defect else {"reward": 1.0 if outcome == "passed" else 0.0},
                primary_reward=None if defect else 1.0 if outcome == "passed" else 0.0,
            ),
        ]
    assert len(agents) >= 1
    events.append(RunExecutionCompleted(run_id=run_id))
    stored = gw.store.append(run_stream(run_id), [new_event(e, actor="run-scheduler") for e in events])
    scorer = Scorer(gw.store)
    scorer.on_event(stored[-1])
    finished = [e for e in gw.store.read_stream(run_stream(run_id)) if e.type == "RunFinished"]
    scorer.on_event(finished[0])
    gw.settle()


def _board(gw: Gateway, benchmark_id: str) -> list[dict[str, Any]]:
    return gw.ok(gw.v1("GET", f"/benchmarks/{benchmark_id}/leaderboard"))["leaderboard"]


def _exclusion_scored(gw: Gateway, benchmark_id: str) -> None:
    """Scoring consumes the exclusion as it would from the bus."""
    (excluded,) = [
        e
        for e in gw.store.read_stream(benchmark_stream(benchmark_id))
        if e.type == BenchmarkTaskExcluded.type_name
    ]
    Scorer(gw.store).on_event(excluded)
    gw.settle()


def test_an_excluded_task_lets_the_other_tasks_results_rank(gateway: Gateway) -> None:
    gw = gateway
    benchmark_id = gw.benchmark("demo", TASKS)
    oracle, nop = demo_config()["agents"]
    # An earlier run on which every task built: it ranks on all three tasks.
    earlier = gw.submit(demo_config(agents=[oracle]))["id"]
    _finish(gw, earlier, {(0, task): "passed" for task in TASKS})
    # Then t1's Dockerfile broke: the later run's participant has an unscored attempt.
    later = gw.submit(demo_config(agents=[nop]))["id"]
    _finish(gw, later, {(0, "t1"): "defect", (0, "t2"): "passed", (0, "t3"): "failed"})
    before = _board(gw, benchmark_id)
    assert [(r["run_id"], r["pass_at_1"]["n"]) for r in before] == [(earlier, 3)], (
        "the later run does not rank"
    )

    before_ranking = gw.ok(gw.v1("GET", f"/runs/{later}"))["leaderboard_qualification"]
    assert [(a["ranks"], a["reason"]) for a in before_ranking["agents"]] == [
        (False, "1 errored attempts have no score")
    ]
    assert before_ranking["excluded_tasks"] == []

    body = {"task": "t1", "reason": REASON}
    excluded = gw.ok(gw.v1("POST", f"/benchmarks/{benchmark_id}/exclusions", json=body), 201)
    assert excluded == {"benchmark_id": benchmark_id, "version": "1.0", **body}
    _exclusion_scored(gw, benchmark_id)

    after = _board(gw, benchmark_id)
    # The later run ranks on t2 and t3 (pass@1 over the remaining tasks, N = 2); the earlier run, of the
    # same version, is scored without t1 too (N = 2, not 3), so the two share one comparison group and
    # no row mixes scores with and without the task.
    assert sorted(
        (r["run_id"], r["harness"], r["pass_at_1"]["value"], r["pass_at_1"]["n"]) for r in after
    ) == sorted([(earlier, "oracle", 1.0, 2), (later, "nop", 0.5, 2)])
    assert len({r["section"]["key"] for r in after}) == 1
    for row in after:
        assert row["section"]["excluded_tasks"] == [{"task": "t1", "reason": REASON}]
        assert row["pass_at_k"] and all(p["k"] <= 1 for p in row["pass_at_k"])

    # The later run's page no longer says its agent cannot rank: it names the task it is scored without.
    ranking = gw.ok(gw.v1("GET", f"/runs/{later}"))["leaderboard_qualification"]
    assert [(a["ranks"], a["reason"]) for a in ranking["agents"]] == [(True, None)]
    assert ranking["excluded_tasks"] == [{"task": "t1", "reason": REASON}]
    run_page = gw.client.get(f"/benchmarks/runs/{later}", cookies={"regatta_token": ADMIN_TOKEN}).text
    assert "Scored without task" in run_page and REASON in run_page
    assert "have no score" not in run_page

    detail = gw.ok(gw.v1("GET", f"/benchmarks/{benchmark_id}"))["benchmark"]
    assert [(e["task"], e["version"], e["reason"]) for e in detail["excluded_tasks"]] == [
        ("t1", "1.0", REASON)
    ]
    assert {t["name"]: t["excluded_reason"] for t in detail["tasks"]} == {
        "t1": REASON,
        "t2": None,
        "t3": None,
    }
    page = gw.client.get(f"/benchmarks/{benchmark_id}", cookies={"regatta_token": ADMIN_TOKEN})
    assert "scored without task" in page.text and REASON in page.text
    (entry,) = gw.ok(gw.v1("GET", "/audit?kind=BenchmarkTaskExcluded"))["entries"]
    assert "task=t1" in entry["summary"] and REASON in entry["summary"]

    again = gw.v1("POST", f"/benchmarks/{benchmark_id}/exclusions", json={"task": "t1", "reason": REASON})
    assert again.status_code == 409, again.text


def test_an_exclusion_is_refused_to_a_non_admin_and_without_a_reason(gateway: Gateway) -> None:
    gw = gateway
    benchmark_id = gw.benchmark("demo", TASKS)
    bob = gw.member("default", "bob@example.com")
    path = f"/benchmarks/{benchmark_id}/exclusions"
    before = gw.event_count()

    refused = gw.v1("POST", path, json={"task": "t1", "reason": REASON}, token=bob)
    assert refused.status_code == 403, refused.text
    assert refused.json()["code"] == "FORBIDDEN" and "workspace admin" in refused.json()["message"]
    for body in ({"task": "t1"}, {"task": "t1", "reason": "   "}, {"task": "t1", "reason": 3}):
        response = gw.v1("POST", path, json=body)
        assert response.status_code == 400, response.text
        assert response.json()["field"] == "reason", response.text
    unknown = gw.v1("POST", path, json={"task": "no-such-task", "reason": REASON})
    assert unknown.status_code == 400 and unknown.json()["field"] == "task", unknown.text
    assert gw.event_count() == before, "a refused exclusion records nothing"
    page = gw.client.get(f"/benchmarks/{benchmark_id}", cookies={"regatta_token": bob})
    assert 'data-testid="exclude-task"' not in page.text
    page = gw.client.get(f"/benchmarks/{benchmark_id}", cookies={"regatta_token": ADMIN_TOKEN})
    assert 'data-testid="exclude-task"' in page.text
