"""The New Run form's preview asks the server what a submission would schedule (POST /api/v1/runs/preview):
the count a submission of the same body then records, worked out by the submission's own resolution, with
nothing recorded and bad input refused as a submission refuses it."""

from __future__ import annotations

from typing import Any

from regatta_shared.events import BenchmarkMetadata

from .conftest import Gateway, demo_config

# t9 is in the set but not a task of the benchmark: the set lists 3 names, a run of it has 2 tasks.
SETS = BenchmarkMetadata(task_sets={"small": ["t1", "t3", "t9"]})


def test_the_preview_counts_what_the_submission_then_schedules(pg_gateway: Gateway) -> None:
    gw = pg_gateway
    gw.benchmark("demo", ["t1", "t2", "t3", "t4"], metadata=SETS)
    body = demo_config(tasks_config={"task_set": "small"}, execution_config={"attempts_per_task": 3})
    before = gw.event_count()

    preview = gw.ok(gw.v1("POST", "/runs/preview", json=body))

    assert preview == {
        "tasks": 2,
        "agents": 2,
        "attempts_per_task": 3,
        "attempts_per_agent": 6,
        "expected_attempts": 12,
    }
    assert gw.event_count() == before, "a preview records nothing"
    run_id = gw.submit(body)["id"]
    gw.settle()
    detail = gw.ok(gw.v1("GET", f"/runs/{run_id}"))
    assert detail["progress"]["expected"] == preview["expected_attempts"]


def test_a_form_still_being_filled_in_is_counted_and_bad_settings_are_refused(pg_gateway: Gateway) -> None:
    gw = pg_gateway
    gw.benchmark("demo", ["t1", "t2", "t3"], categories={"t1": "a", "t2": "a", "t3": "b"})
    gw.benchmark("elsewhere", ["t1"], workspace=gw.workspace("beta"))
    # An agent without a model yet counts: the form shows the total before every field is filled.
    unfinished = {"experiment_config": {"benchmark": "demo"}, "agents": [{"env": {}}]}

    def preview(**changes: Any) -> Any:
        return gw.v1("POST", "/runs/preview", json={**unfinished, **changes})

    before = gw.event_count()
    counted = gw.ok(preview(tasks_config={"categories": ["a"]}))
    assert (counted["tasks"], counted["agents"], counted["expected_attempts"]) == (2, 1, 2)
    refused = preview(execution_config={"attempts_per_task": 0})
    assert refused.status_code == 400, refused.text
    assert refused.json()["field"] == "execution_config.attempts_per_task"
    unknown = preview(tasks_config={"categories": ["zzz"]})
    assert unknown.status_code == 400 and unknown.json()["field"] == "tasks.categories", unknown.text
    too_many = preview(agents=[{}] * 9)
    assert too_many.status_code == 400 and too_many.json()["field"] == "agents", too_many.text
    foreign = preview(experiment_config={"benchmark": "elsewhere"})
    assert foreign.status_code == 404, foreign.text
    assert gw.event_count() == before, "a preview records nothing"
