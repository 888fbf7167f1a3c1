"""The New Run form's preview asks the server what a submission would schedule (POST /api/v1/runs/preview):
the count a submission of the same body then records, worked out by the submission's own resolution, with
nothing recorded and bad input refused as a submission refuses it. The route only decodes the body and
calls `run_preview.preview_run`, so these rules are tested on the service layer."""

from __future__ import annotations

import json
from typing import Any

from regatta_gateway.commands import run_preview
from regatta_gateway.commands import runs as run_commands
from regatta_gateway.errors import Invalid, NotFound
from regatta_shared.events import BenchmarkMetadata

from .conftest import demo_config
from .service_support import Services, refused

# t9 is in the set but not a task of the benchmark: the set lists 3 names, a run of it has 2 tasks.
SETS = BenchmarkMetadata(task_sets={"small": ["t1", "t3", "t9"]})


def preview(sv: Services, body: dict[str, Any]) -> dict[str, Any]:
    """As the route does: the body parsed as a preview request (it may be unfinished), then previewed."""
    parsed = run_commands.parse_submission(
        json.dumps(body).encode(), "application/json", run_preview.PreviewRequest
    )
    return run_preview.preview_run(sv.store, sv.scope(), parsed)


def test_the_preview_counts_what_the_submission_then_schedules(pg_services: Services) -> None:
    sv = pg_services
    sv.benchmark("demo", ["t1", "t2", "t3", "t4"], metadata=SETS)
    body = demo_config(tasks_config={"task_set": "small"}, execution_config={"attempts_per_task": 3})
    before = sv.event_count()

    previewed = preview(sv, body)

    assert previewed == {
        "tasks": 2,
        "agents": 2,
        "attempts_per_task": 3,
        "attempts_per_agent": 6,
        "expected_attempts": 12,
    }
    assert sv.event_count() == before, "a preview records nothing"
    run_id = sv.submit(body)["id"]
    assert sv.run(run_id)["progress"]["expected"] == previewed["expected_attempts"]


def test_a_form_still_being_filled_in_is_counted_and_bad_settings_are_refused(
    pg_services: Services,
) -> None:
    sv = pg_services
    sv.benchmark("demo", ["t1", "t2", "t3"], categories={"t1": "a", "t2": "a", "t3": "b"})
    sv.benchmark("elsewhere", ["t1"], workspace=sv.workspace("beta"))
    # An agent without a model yet counts: the form shows the total before every field is filled.
    unfinished = {"experiment_config": {"benchmark": "demo"}, "agents": [{"env": {}}]}

    def previewing(**changes: Any) -> Any:
        return lambda: preview(sv, {**unfinished, **changes})

    before = sv.event_count()
    counted = previewing(tasks_config={"categories": ["a"]})()
    assert (counted["tasks"], counted["agents"], counted["expected_attempts"]) == (2, 1, 2)
    zero = refused(previewing(execution_config={"attempts_per_task": 0}), Invalid)
    assert zero.field == "execution_config.attempts_per_task"
    assert refused(previewing(tasks_config={"categories": ["zzz"]}), Invalid).field == "tasks.categories"
    assert refused(previewing(agents=[{}] * 9), Invalid).field == "agents"
    refused(previewing(experiment_config={"benchmark": "elsewhere"}), NotFound)
    assert sv.event_count() == before, "a preview records nothing"
