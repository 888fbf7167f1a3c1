"""Issue 30, Compare: two agents of one run task by task on the web page (reached from the run page), its
filters, its CSV, and the same comparison from `regatta run compare`. Then Annotate, on the same finished
run: a label put on an attempt from the run page shows on the results table, filters it, and comes off.

The tasks make the outcome known: on `up-*` the oracle passes and nop fails; `down` passes only when
nothing is done, so there the oracle (which writes the file) fails and nop passes. B = oracle against
A = nop therefore improves on two tasks and regresses on one: pass@1 1/3 → 2/3, +33.3 pp, and with m = 3
discordant tasks and T = 1 the two-sided sign-flip p is 1 (every assignment reaches |Σ| ≥ 1).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, expect

from tests.e2e.test_cli import regatta
from tests.e2e.web_ui_layout import assert_readable
from tests.e2e.web_ui_support import ACK_WAIT, RUN, add_folder_benchmark, sign_in
from tests.support.tasks import run_toml, write_task


def _tasks(root: Path) -> Path:
    write_task(root, "up-a", category="even")
    write_task(root, "up-b", category="odd")
    down = write_task(root, "down", category="odd")
    (down / "tests" / "test.sh").write_text(
        "#!/bin/bash\nif [ -e /app/out.txt ]; then echo 0; else echo 1; fi > /logs/verifier/reward.txt\n"
    )
    return root


def test_compare_page_shows_improved_and_regressed_tasks_filters_the_cli_table_and_labels(
    shared_stack, api_for, page: Page, tmp_path: Path
) -> None:
    stack = shared_stack(executors=1, **ACK_WAIT)
    api = api_for(stack)
    add_folder_benchmark(api, _tasks(tmp_path / "tasks"), "compare-me")
    api.benchmark_ready("compare-me")
    run_id = api.submit_toml(run_toml("compare-me", agents=("nop", "oracle")))["id"]
    assert api.wait_run(run_id, timeout=RUN / 1000)["benchmark_run"]["status"] == "finished"
    outcomes = {
        (a["agent_index"], a["task"]): a["outcome"] for a in api.get(f"/runs/{run_id}/attempts")["attempts"]
    }
    assert outcomes == {
        (0, "up-a"): "failed",
        (0, "up-b"): "failed",
        (0, "down"): "passed",
        (1, "up-a"): "passed",
        (1, "up-b"): "passed",
        (1, "down"): "failed",
    }

    sign_in(page, stack)
    page.goto(f"{stack.url}/benchmarks/runs/{run_id}")
    page.get_by_test_id("compare-agents").click()
    expect(page).to_have_url(f"{stack.url}/compare?a={run_id}%3A0&b={run_id}%3A1")
    summary = page.get_by_test_id("compare-summary")
    expect(summary.get_by_test_id("summary-a")).to_contain_text("33.3%")
    expect(summary.get_by_test_id("summary-b")).to_contain_text("66.7%")
    expect(summary.get_by_test_id("summary-difference")).to_have_text("+33.3 pp")
    expect(summary.get_by_test_id("summary-p")).to_have_text("1")
    expect(summary.get_by_test_id("summary-counts")).to_have_text("2 improved · 1 regressed · 0 same")
    rows = page.get_by_test_id("compare-table").locator("tbody tr")
    expect(rows).to_have_count(3)
    down = rows.filter(has=page.get_by_text("down", exact=True))
    expect(down.locator("td")).to_have_text(
        ["down", "odd", "100.0% (1/1)", "0.0% (0/1)", "-100.0 pp", "regressed"]
    )
    assert_readable(page, "compare", ["Compare", "+33.3 pp", "regressed", "improved"])

    # Filters: the regressed task only; then improved tasks of one category.
    page.get_by_label("Change").select_option("regressed")
    page.get_by_test_id("compare-apply").click()
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-task", "down")
    page.get_by_label("Change").select_option("improved")
    page.get_by_label("Category").select_option("odd")
    page.get_by_test_id("compare-apply").click()
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-task", "up-b")
    # The overall figures never depend on the filter.
    expect(summary.get_by_test_id("summary-difference")).to_have_text("+33.3 pp")

    with page.expect_download() as download:
        page.get_by_test_id("compare-csv").click()
    table = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text())))
    assert {(r["task"], r["verdict"]) for r in table} == {
        ("up-a", "improved"),
        ("up-b", "improved"),
        ("down", "regressed"),
    }

    # The CLI counts agents from 1: RUN is its first agent, RUN:2 its second.
    shown = regatta(stack, "run", "compare", run_id, f"{run_id}:2")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    lines = [line for line in shown.stdout.splitlines() if "down" in line or "up-" in line]
    assert len(lines) == 3 and any(
        "down" in line and "regressed" in line and "-100.0 pp" in line for line in lines
    )
    assert "difference +33.3 pp" in shown.stdout and "p = 1 " in shown.stdout
    assert "2 improved, 1 regressed, 0 same" in shown.stdout
    as_json = json.loads(regatta(stack, "run", "compare", f"{run_id}:1", f"{run_id}:2", "--json").stdout)
    assert as_json["summary"]["difference"] == 1 / 3 and as_json["summary"]["p_value"] == 1.0

    _label_an_attempt_on_the_run_page(page, stack.url, api, run_id)


def _label_an_attempt_on_the_run_page(page: Page, url: str, api: Any, run_id: str) -> None:
    page.goto(f"{url}/benchmarks/runs/{run_id}?tab=results")
    rows = page.get_by_test_id("results-table").locator("tr[data-attempt-id]")
    expect(rows).to_have_count(6)
    down = rows.filter(has_text="down").filter(has_text="oracle")
    down.get_by_role("button").first.click()
    labels = page.get_by_test_id("labels-block")
    expect(labels).to_contain_text("No labels yet.")
    labels.get_by_test_id("label-input").fill("Reward Hacking")
    labels.get_by_test_id("label-note").fill("wrote the file the test looks for")
    labels.get_by_test_id("label-add").click()
    expect(down.get_by_test_id("attempt-label")).to_have_text("reward hacking")
    expect(down.get_by_test_id("attempt-label")).to_have_attribute(
        "title", "wrote the file the test looks for"
    )
    # The same label again is refused, with the reason on the page.
    labels = page.get_by_test_id("labels-block")
    labels.get_by_test_id("label-input").fill("reward hacking")
    labels.get_by_test_id("label-add").click()
    expect(labels.get_by_test_id("label-message")).to_contain_text("already has the label")
    assert_readable(page, "run-labels", ["reward hacking", "wrote the file the test looks for"])

    page.get_by_test_id("label-filter").select_option("reward hacking")
    expect(rows).to_have_count(1)
    expect(page).to_have_url(f"{url}/benchmarks/runs/{run_id}?tab=results&label=reward+hacking")
    page.reload()
    expect(rows).to_have_count(1)  # the filter is in the URL, kept across a reload
    page.get_by_test_id("label-filter").select_option("(none)")
    expect(rows).to_have_count(5)
    labelled = [a for a in api.get(f"/runs/{run_id}/attempts")["attempts"] if a["labels"]]
    assert [(a["task"], a["agent_index"], [x["label"] for x in a["labels"]]) for a in labelled] == [
        ("down", 1, ["reward hacking"])
    ]

    page.get_by_test_id("label-filter").select_option("")
    down.get_by_role("button").first.click()
    page.get_by_test_id("labels-block").get_by_role("button", name="Remove the label reward hacking").click()
    expect(down.get_by_test_id("attempt-label")).to_have_count(0)
    assert all(not a["labels"] for a in api.get(f"/runs/{run_id}/attempts")["attempts"])
