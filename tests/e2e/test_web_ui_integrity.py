"""Issue 36 as a reviewer sees it, on the running stack: a finished run whose attempt changed a program of
the verifier's tool chain shows the count on its leaderboard row, the count leads to that attempt, and
the attempt's page shows the recorded change (both sides, nothing explaining it) with the label actions
beside it; readable at desktop widths and on a phone.

The attempts' evidence comes from an executor of the `container` environment (another test proves it
records it); here the run's history is written as the scheduler would record those reports, and the
stack's own scoring, projections and pages do the rest.
"""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Page, expect
from regatta_shared.events import (
    AgentSpec,
    AttemptFinished,
    AttemptScheduled,
    AttemptStarted,
    ExecutionSettings,
    ModelSpec,
    RunExecutionCompleted,
    RunQueued,
    RunStarted,
    RunSubmitted,
    RunTask,
    TaskSelection,
)
from regatta_shared.events.integrity import AttemptIntegrity, FileFacts, ToolChainChange
from regatta_shared.eventstore import EventStore, new_event
from regatta_shared.ids import attempt_id, new_id, run_stream
from regatta_shared.rules.conditions import ScoringConditions

from tests.e2e.web_ui_layout import assert_readable
from tests.e2e.web_ui_support import ACK_WAIT, sign_in

SWAPPED = ToolChainChange(
    path="/usr/bin/python3",
    change="changed",
    before=FileFacts(kind="file", size=6_831_736, sha256="1" * 64, mode=0o755),
    after=FileFacts(kind="file", size=58, sha256="2" * 64, mode=0o755),
)
COUNT = "1 attempt with unexplained changes to the verifier's tools"


def _record_run(stack: Any, benchmark: dict[str, Any]) -> tuple[str, str, str]:
    """A finished one-agent run over every task of `benchmark`, each attempt passed; the first one's
    evidence names an unexplained change. Returns (run id, that attempt's id, its task)."""
    tasks = [
        RunTask(name=t["name"], digest=t["digest"]) for t in benchmark["tasks"] if not t["invalid_reason"]
    ]
    run_id = new_id("run")
    submitted = RunSubmitted(
        run_id=run_id,
        workspace_id=stack.workspace_id,
        name="integrity-review",
        benchmark_id=benchmark["id"],
        benchmark_name=benchmark["name"],
        benchmark_version=benchmark["version"],
        benchmark_digest=benchmark["digest"],
        selection=TaskSelection(),
        tasks=tasks,
        agents=[AgentSpec(index=0, harness="oracle", model=ModelSpec(type="hosted", base_model="reviewed"))],
        execution=ExecutionSettings(pass_threshold=1.0),
        standard_conditions=ScoringConditions.model_validate(benchmark["scoring_conditions"]),
    )
    events: list[Any] = [
        submitted,
        RunQueued(run_id=run_id, expected_attempts=len(tasks)),
        RunStarted(run_id=run_id),
    ]
    for index, task in enumerate(tasks):
        aid = attempt_id(run_id, 0, task.name, 0)
        seen = (
            AttemptIntegrity(changes=[SWAPPED], changes_total=1, unexplained=1)
            if index == 0
            else AttemptIntegrity()
        )
        events += [
            AttemptScheduled(run_id=run_id, attempt_id=aid, agent_index=0, task=task.name, attempt_index=0),
            AttemptStarted(run_id=run_id, attempt_id=aid, try_number=1, executor_id="exec-container"),
            AttemptFinished(
                run_id=run_id,
                attempt_id=aid,
                agent_index=0,
                task=task.name,
                attempt_index=0,
                try_number=1,
                outcome="passed",
                rewards={"reward": 1.0},
                primary_reward=1.0,
                executor_id="exec-container",
                environment="container",
                environment_built=True,
                integrity=seen,
            ),
        ]
    events.append(RunExecutionCompleted(run_id=run_id))
    store = EventStore(stack.database_url)
    try:
        store.append(run_stream(run_id), [new_event(e, actor="run-scheduler") for e in events], 0)
    finally:
        store.dispose()
    return run_id, attempt_id(run_id, 0, tasks[0].name, 0), tasks[0].name


def test_a_recorded_change_is_counted_on_the_leaderboard_and_shown_on_its_attempt_page(
    shared_stack, api_for, page: Page
) -> None:
    stack = shared_stack(executors=1, **ACK_WAIT)
    api = api_for(stack)
    benchmark = api.get(f"/benchmarks/{api.benchmark_ready('regatta-examples')['id']}")["benchmark"]
    run_id, changed, task = _record_run(stack, benchmark)
    # Projected, then scored and finished by the stack's own services.
    api.wait_for(lambda: api.http.get(f"/api/v1/runs/{run_id}").status_code == 200)
    assert api.wait_run(run_id)["benchmark_run"]["status"] == "finished"
    api.wait_for(
        lambda: [r["run_id"] for r in api.get(f"/benchmarks/{benchmark['id']}/leaderboard")["leaderboard"]]
    )
    row = api.get(f"/benchmarks/{benchmark['id']}/leaderboard")["leaderboard"][0]
    assert (row["run_id"], row["integrity"]["unexplained"]) == (run_id, 1)
    sign_in(page, stack)

    # The leaderboard row says how many attempts to review, and leads to exactly them.
    page.goto(f"{stack.url}/benchmarks/{benchmark['id']}")
    board = page.get_by_test_id("leaderboard")
    expect(board.get_by_test_id("integrity-unexplained")).to_have_text(COUNT)
    assert_readable(page, "integrity-leaderboard", [COUNT, "verifier integrity record"])
    board.get_by_test_id("integrity-unexplained").click()
    expect(page.get_by_test_id("integrity-filter")).to_have_value("unexplained")
    results = page.get_by_test_id("results-table").locator("tr[data-attempt-id]")
    expect(results).to_have_count(1)
    expect(results.first).to_have_attribute("data-attempt-id", changed)
    expect(results.first.get_by_test_id("integrity-tag")).to_be_visible()
    assert len(benchmark["tasks"]) > 1, "the filter must have attempts to leave out"

    # The attempt's page: the change with both sides and nothing explaining it; labels beside it.
    results.first.get_by_test_id("integrity-tag").click()
    expect(page).to_have_url(f"{stack.url}/benchmarks/runs/{run_id}/attempts/{changed}")
    change = page.get_by_test_id("integrity-change")
    expect(change.get_by_test_id("change-path")).to_have_text("/usr/bin/python3")
    expect(change.get_by_test_id("change-unexplained")).to_be_visible()
    expect(change).to_contain_text("6831736 bytes")
    expect(change).to_contain_text("2" * 64)
    page.get_by_test_id("label-input").fill("reward hacking")
    page.get_by_test_id("label-note").fill("python3 replaced by a script")
    page.get_by_test_id("label-add").click()
    expect(page.get_by_test_id("attempt-label")).to_contain_text("reward hacking")
    assert_readable(
        page,
        "integrity-attempt",
        [
            task,
            "Record (Harbor's semantics, evidence shown)",
            "1 unexplained change to the verifier's tools",
            "0 agent processes alive when the verifier started",
            "/usr/bin/python3",
            "unexplained",
            "reward hacking",
            "Add label",
        ],
        scroll_to="[data-testid=integrity]",
    )
    labels = api.get(f"/runs/{run_id}/attempts/{changed}")["labels"]
    assert [(x["label"], x["note"]) for x in labels] == [("reward hacking", "python3 replaced by a script")]
