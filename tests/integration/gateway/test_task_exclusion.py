"""Excluding a broken task from a benchmark version (issue 38): a workspace admin records
BenchmarkTaskExcluded with a reason; scoring then ranks every run of that version on its remaining tasks
(earlier runs included, so runs scored with and without the task never share a comparison group), and the
leaderboard names the exclusion. Refused to a non-admin (403) and without a reason (400 naming it).
The exclusion's rules and what the queries then answer are tested on the service layer; the run and
benchmark pages (rendered HTML) and the route's status codes stay on HTTP."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from regatta_gateway.commands.benchmarks import exclude_task
from regatta_gateway.errors import Conflict, Forbidden, Invalid
from regatta_gateway.queries.audit import list_audit
from regatta_gateway.queries.benchmarks import benchmark_detail
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
from regatta_shared.eventstore import EventStore
from regatta_shared.ids import attempt_id, benchmark_stream, run_stream
from regatta_shared.rules.task_defects import TASK_DEFECT

from .conftest import ADMIN_TOKEN, Gateway, demo_config
from .service_support import Services, refused

TASKS = ["t1", "t2", "t3"]
REASON = "its Dockerfile pins a package that no longer exists"


def _finish(store: EventStore, run_id: str, outcomes: dict[tuple[int, str], str]) -> None:
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
    stored = store.append(run_stream(run_id), [new_event(e, actor="run-scheduler") for e in events])
    scorer = Scorer(store)
    scorer.on_event(stored[-1])
    finished = [e for e in store.read_stream(run_stream(run_id)) if e.type == "RunFinished"]
    scorer.on_event(finished[0])


def _exclusion_scored(store: EventStore, benchmark_id: str) -> None:
    """Scoring consumes the exclusion as it would from the bus."""
    (excluded,) = [
        e
        for e in store.read_stream(benchmark_stream(benchmark_id))
        if e.type == BenchmarkTaskExcluded.type_name
    ]
    Scorer(store).on_event(excluded)


def _exclude(sv: Services, body: dict[str, Any], token: str = ADMIN_TOKEN, benchmark: str = "demo") -> Any:
    return lambda: exclude_task(sv.store, sv.scope(token), benchmark, body)


def _earlier_and_later_runs(
    submit: Callable[[dict[str, Any]], dict[str, Any]], store: EventStore
) -> tuple[str, str]:
    """An earlier run on which every task built (it ranks on all three), then a later one after t1's
    Dockerfile broke (its participant has an unscored attempt)."""
    oracle, nop = demo_config()["agents"]
    earlier = submit(demo_config(agents=[oracle]))["id"]
    _finish(store, earlier, {(0, task): "passed" for task in TASKS})
    later = submit(demo_config(agents=[nop]))["id"]
    _finish(store, later, {(0, "t1"): "defect", (0, "t2"): "passed", (0, "t3"): "failed"})
    return earlier, later


def test_an_excluded_task_lets_the_other_tasks_results_rank(services: Services) -> None:
    sv = services
    benchmark_id = sv.benchmark("demo", TASKS)
    earlier, later = _earlier_and_later_runs(sv.submit, sv.store)
    sv.settle()
    before = sv.leaderboard(benchmark_id)["leaderboard"]
    assert [(r["run_id"], r["pass_at_1"]["n"]) for r in before] == [(earlier, 3)], (
        "the later run does not rank"
    )

    before_ranking = sv.run(later)["leaderboard_qualification"]
    assert [(a["ranks"], a["reason"]) for a in before_ranking["agents"]] == [
        (False, "1 errored attempts have no score")
    ]
    assert before_ranking["excluded_tasks"] == []

    body = {"task": "t1", "reason": REASON}
    excluded = _exclude(sv, body, benchmark=benchmark_id)()
    assert excluded == {"benchmark_id": benchmark_id, "version": "1.0", **body}
    sv.settle()
    _exclusion_scored(sv.store, benchmark_id)
    sv.settle()

    after = sv.leaderboard(benchmark_id)["leaderboard"]
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

    # The later run no longer says its agent cannot rank: it names the task it is scored without.
    ranking = sv.run(later)["leaderboard_qualification"]
    assert [(a["ranks"], a["reason"]) for a in ranking["agents"]] == [(True, None)]
    assert ranking["excluded_tasks"] == [{"task": "t1", "reason": REASON}]

    detail = benchmark_detail(sv.store, sv.scope(), benchmark_id)["benchmark"]
    assert [(e["task"], e["version"], e["reason"]) for e in detail["excluded_tasks"]] == [
        ("t1", "1.0", REASON)
    ]
    assert {t["name"]: t["excluded_reason"] for t in detail["tasks"]} == {
        "t1": REASON,
        "t2": None,
        "t3": None,
    }
    (entry,) = list_audit(sv.store, sv.scope(), kind="BenchmarkTaskExcluded")["entries"]
    assert "task=t1" in entry["summary"] and REASON in entry["summary"]

    refused(_exclude(sv, body, benchmark=benchmark_id), Conflict)


def test_an_exclusion_is_refused_to_a_non_admin_and_without_a_reason(services: Services) -> None:
    sv = services
    sv.benchmark("demo", TASKS)
    bob = sv.member("default", "bob@example.com")
    before = sv.event_count()

    refusal = refused(_exclude(sv, {"task": "t1", "reason": REASON}, token=bob), Forbidden, "FORBIDDEN")
    assert "workspace admin" in refusal.message
    for body in ({"task": "t1"}, {"task": "t1", "reason": "   "}, {"task": "t1", "reason": 3}):
        assert refused(_exclude(sv, body), Invalid).field == "reason", body
    assert refused(_exclude(sv, {"task": "no-such-task", "reason": REASON}), Invalid).field == "task"
    assert sv.event_count() == before, "a refused exclusion records nothing"


def test_the_pages_name_the_exclusion_and_offer_it_to_admins_only(gateway: Gateway) -> None:
    """The run and benchmark pages say what a run is scored without; the Exclude button is shown to the
    workspace admins the command accepts. The route answers 201, then 409 for the same exclusion."""
    gw = gateway
    benchmark_id = gw.benchmark("demo", TASKS)
    bob = gw.member("default", "bob@example.com")
    _, later = _earlier_and_later_runs(gw.submit, gw.store)
    gw.settle()
    page = gw.client.get(f"/benchmarks/{benchmark_id}", cookies={"regatta_token": bob})
    assert 'data-testid="exclude-task"' not in page.text
    page = gw.client.get(f"/benchmarks/{benchmark_id}", cookies={"regatta_token": ADMIN_TOKEN})
    assert 'data-testid="exclude-task"' in page.text
    body = {"task": "t1", "reason": REASON}
    refused_to_bob = gw.v1("POST", f"/benchmarks/{benchmark_id}/exclusions", json=body, token=bob)
    assert refused_to_bob.status_code == 403, refused_to_bob.text

    gw.ok(gw.v1("POST", f"/benchmarks/{benchmark_id}/exclusions", json=body), 201)
    _exclusion_scored(gw.store, benchmark_id)
    gw.settle()

    run_page = gw.client.get(f"/benchmarks/runs/{later}", cookies={"regatta_token": ADMIN_TOKEN}).text
    assert "Scored without task" in run_page and REASON in run_page
    assert "have no score" not in run_page
    page = gw.client.get(f"/benchmarks/{benchmark_id}", cookies={"regatta_token": ADMIN_TOKEN})
    assert "scored without task" in page.text and REASON in page.text
    again = gw.v1("POST", f"/benchmarks/{benchmark_id}/exclusions", json=body)
    assert again.status_code == 409, again.text
