"""Issue 28: a finished run whose attempts errored from an infrastructure fault does not rank; "Re-run
errored attempts" (API, CLI, run page) runs exactly those attempts again under the run's conditions, and
once none is errored the run finishes again and ranks.

The fault: a real `local` sandbox whose first start per task fails (tests/support/flaky_environment.py),
with the platform's own infrastructure retries off, so the attempt ends `errored`.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.e2e.test_cli import regatta
from tests.e2e.test_executor import add_folder, run_events
from tests.e2e.web_ui_support import shot, sign_in
from tests.support.tasks import run_toml, write_task


def _faulty_stack(make_stack, tmp_path: Path):
    """A stack whose sandboxes of task `shaky` fail to start once; `steady` starts at once."""
    counters = tmp_path / "counters"
    counters.mkdir()
    (counters / "steady.starts").write_text("1")  # its one injected failure counts as spent
    return make_stack(
        executors=1,
        REGATTA_EXECUTOR_ENVIRONMENT="tests.support.flaky_environment:FlakyLocalEnvironment",
        REGATTA_EXECUTOR_ENVIRONMENT_KWARGS=json.dumps({"failures": 1, "counter_dir": str(counters)}),
        REGATTA_INFRA_RETRIES="0",
    )


def _errored_run(api, tmp_path: Path, name: str) -> tuple[dict, str]:
    tasks = tmp_path / "tasks"
    write_task(tasks, "steady")
    write_task(tasks, "shaky")
    benchmark = add_folder(api, tasks, name)
    run_id = api.submit_toml(run_toml(name))["id"]
    detail = api.wait_run(run_id)
    assert detail["benchmark_run"]["status"] == "finished", detail["benchmark_run"]
    assert detail["totals"]["passed"] == 1 and detail["totals"]["errored"] == 1
    return benchmark, run_id


def _types(stack, run_id: str) -> Counter[str]:
    return Counter(kind for kind, _ in run_events(stack, run_id))


def test_a_rerun_of_errored_attempts_makes_the_run_rank(make_stack, api_for, tmp_path) -> None:
    stack = _faulty_stack(make_stack, tmp_path)
    api = api_for(stack)
    benchmark, run_id = _errored_run(api, tmp_path, "faulty")

    before = api.get(f"/runs/{run_id}")
    (agent,) = before["leaderboard_qualification"]["agents"]
    assert agent["ranks"] is False and "1 errored attempts have no score" in agent["reason"], agent
    assert api.get(f"/benchmarks/{benchmark['id']}/leaderboard")["leaderboard"] == []
    errored = [a for a in api.get(f"/runs/{run_id}/attempts")["attempts"] if a["outcome"] == "errored"]
    assert [a["task"] for a in errored] == ["shaky"]

    # The CLI asks; the run was running again when it answered (the answer waits for the read model),
    # so the next `finished` is the re-run's.
    cli = regatta(stack, "run", "rerun-errored", run_id)
    assert cli.returncode == 0, cli.stderr
    assert f"Re-running 1 errored attempt of {run_id}" in cli.stdout
    detail = api.wait_run(run_id)
    assert detail["benchmark_run"]["status"] == "finished", detail["benchmark_run"]
    assert detail["totals"]["passed"] == 2 and detail["totals"]["errored"] == 0, detail["totals"]
    attempts = api.get(f"/runs/{run_id}/attempts")["attempts"]
    assert sorted((a["task"], a["outcome"]) for a in attempts) == [("shaky", "passed"), ("steady", "passed")]
    # The same slot: the re-run keeps the errored attempt's id, and its history stays in the events.
    assert [a["attempt_id"] for a in attempts if a["task"] == "shaky"] == [errored[0]["attempt_id"]]
    events = run_events(stack, run_id)
    shaky = [d["outcome"] for kind, d in events if kind == "AttemptFinished" and d["task"] == "shaky"]
    assert shaky == ["errored", "passed"]
    (rerun,) = [d for kind, d in events if kind == "ErroredAttemptsRerunRequested"]
    assert rerun["attempt_ids"] == [errored[0]["attempt_id"]] and rerun["rerun"] == 1
    types = _types(stack, run_id)
    assert types["RunFinished"] == 2 and types["AttemptScheduled"] == 3, types
    assert any("Re-run of 1 errored attempt requested" in e["message"] for e in api.all_logs(run_id))

    qualification = detail["leaderboard_qualification"]
    assert qualification["qualifies"] is True and qualification["agents"][0]["ranks"] is True, qualification
    metrics = detail["agent_metrics"][0]
    assert metrics["errored"] == 0 and metrics["passed"] == 2 and metrics["pass_at_1"]["value"] == 1.0
    rows = api.wait_for(
        lambda: api.get(f"/benchmarks/{benchmark['id']}/leaderboard")["leaderboard"], timeout=60
    )
    assert [row["run_id"] for row in rows] == [run_id]

    # Nothing errored any more: asked again, it is refused and nothing is recorded.
    again = regatta(stack, "run", "rerun-errored", run_id)
    assert again.returncode != 0
    assert "the run has no errored attempts" in again.stdout + again.stderr
    assert _types(stack, run_id) == types


def test_the_run_page_offers_the_rerun_only_when_a_finished_run_has_errored_attempts(
    make_stack, api_for, tmp_path, page: Page
) -> None:
    stack = _faulty_stack(make_stack, tmp_path)
    api = api_for(stack)
    benchmark, run_id = _errored_run(api, tmp_path, "faulty-page")
    sign_in(page, stack)
    # The leaderboard says why the agent is not on it.
    page.goto(f"{stack.url}/benchmarks/{benchmark['id']}")
    expect(page.get_by_test_id("leaderboard-empty")).to_be_visible()
    (agent,) = page.get_by_test_id("not-ranked-agent").all()
    expect(agent).to_contain_text("oracle")
    expect(agent.get_by_test_id("not-ranked-reason")).to_have_text("1 errored attempts have no score")
    shot(page, "leaderboard-not-ranked")

    page.goto(f"{stack.url}/benchmarks/runs/{run_id}")
    button = page.get_by_test_id("rerun-errored")
    expect(button).to_have_text("Re-run errored attempts")
    shot(page, "run-rerun-errored-offered")
    button.click()
    expect(button).to_have_count(0)  # the run is running again, then has nothing errored

    def finished_again() -> bool:
        detail = api.get(f"/runs/{run_id}")
        return detail["benchmark_run"]["status"] == "finished" and detail["totals"]["errored"] == 0

    api.wait_for(finished_again, timeout=120)
    expect(page.get_by_test_id("run-status")).to_contain_text("finished")
    page.reload()
    expect(page.get_by_test_id("run-status")).to_contain_text("finished")
    expect(page.get_by_test_id("rerun-errored")).to_have_count(0)

    # Ranked now: a leaderboard row, and nothing left in the "Not ranked" list.
    api.wait_for(lambda: api.get(f"/benchmarks/{benchmark['id']}/leaderboard")["leaderboard"], timeout=60)
    page.goto(f"{stack.url}/benchmarks/{benchmark['id']}")
    expect(page.get_by_test_id("leaderboard-table").locator("tbody tr")).to_have_count(1)
    expect(page.get_by_test_id("not-ranked")).to_have_count(0)
