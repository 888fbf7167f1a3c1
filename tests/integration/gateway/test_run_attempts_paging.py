"""GET /api/v1/runs/{key}/attempts: all attempts by default (unchanged shape); optional limit/offset pages
and task/agent/outcome filters, so a run page need not load a 100k-attempt run in one response. What a
page holds is `run_activity.attempts_page`'s answer (the route passes its query parameters through and
serialises the dict), tested on the service layer; the parameters' bounds are the route's (FastAPI's
Query), so their 400s stay on HTTP."""

from __future__ import annotations

from regatta_shared.events import AttemptFinished, AttemptScheduled, RunQueued
from regatta_shared.eventstore import new_event
from regatta_shared.ids import attempt_id, run_stream

from .conftest import Gateway, demo_config
from .service_support import Services


def test_attempts_default_pages_and_filters(services: Services) -> None:
    sv = services
    sv.benchmark("demo", ["t1", "t2", "t3"])
    run_id = sv.submit(demo_config(execution_config={"attempts_per_task": 2}))["id"]
    sv.progress(run_id)

    everything = sv.attempts(run_id)
    assert list(everything) == ["attempts"]
    rows = everything["attempts"]
    assert len(rows) == 3 * 2 * 2
    order = [(r["task"], r["agent_index"], r["attempt_index"]) for r in rows]
    assert order == sorted(order)

    pages: list[dict[str, object]] = []
    offset: int | None = 0
    while offset is not None:
        page = sv.attempts(run_id, limit=5, offset=offset)
        assert len(page["attempts"]) <= 5
        pages += page["attempts"]
        offset = page["next_offset"]
    assert pages == rows

    last = sv.attempts(run_id, limit=12)
    assert last["attempts"] == rows and last["next_offset"] is None
    assert sv.attempts(run_id, offset=10) == {"attempts": rows[10:], "next_offset": None}

    t2 = sv.attempts(run_id, task="t2")["attempts"]
    assert t2 == [r for r in rows if r["task"] == "t2"]
    nop = sv.attempts(run_id, agent_index=1, outcome="failed", limit=2)
    assert nop["attempts"] == [r for r in rows if r["agent_index"] == 1][:2]
    assert nop["next_offset"] == 2
    assert sv.attempts(run_id, outcome="errored") == {"attempts": []}


def test_attempts_query_parameters_out_of_bounds_are_refused(gateway: Gateway) -> None:
    """The bounds are declared on the route (Query ge/le, the Outcome enum): a request's decoding."""
    gw = gateway
    gw.benchmark("demo", ["t1"])
    run_id = gw.submit(demo_config())["id"]
    path = f"/runs/{run_id}/attempts"
    for bad in ({"limit": 0}, {"offset": -1}, {"outcome": "won"}, {"agent_index": -1}):
        response = gw.v1("GET", path, params=bad)
        assert response.status_code == 400, (bad, response.text)


def test_run_totals_follow_each_finished_attempt(services: Services) -> None:
    """The run page's totals (cached per run and `ingested`) move with every AttemptFinished."""
    sv = services
    sv.benchmark("demo", ["t1", "t2"])
    run_id = sv.submit(demo_config())["id"]
    sv.store.append(run_stream(run_id), [new_event(RunQueued(run_id=run_id, expected_attempts=4))])
    expected = {"passed": 0, "failed": 0, "errored": 0, "cancelled": 0}
    for n, (agent, task, outcome) in enumerate(
        [(0, "t1", "passed"), (0, "t2", "errored"), (1, "t1", "failed"), (1, "t2", "failed")]
    ):
        aid = attempt_id(run_id, agent, task, 0)
        scheduled = AttemptScheduled(
            run_id=run_id, attempt_id=aid, agent_index=agent, task=task, attempt_index=0
        )
        finished = AttemptFinished(
            run_id=run_id,
            attempt_id=aid,
            agent_index=agent,
            task=task,
            attempt_index=0,
            try_number=1,
            outcome=outcome,  # type: ignore[arg-type]
        )
        sv.store.append(run_stream(run_id), [new_event(scheduled)])
        sv.settle()
        assert {k: sv.run(run_id)["totals"][k] for k in expected} == expected
        sv.store.append(run_stream(run_id), [new_event(finished)])
        sv.settle()
        expected[outcome] += 1
        detail = sv.run(run_id)
        assert detail["progress"]["ingested"] == n + 1
        assert {k: detail["totals"][k] for k in expected} == expected
