"""No CSV the platform writes starts a cell with a spreadsheet formula (issue 37): task names and categories
come from a benchmark's author, model names from whoever submits the run. Each download is fetched as a
user fetches it: summary.csv and results.csv through their signed URLs, compare.csv from the API and the
web page."""

from __future__ import annotations

import csv
import io
from typing import Any

from .conftest import ADMIN_TOKEN, Gateway, demo_config

TASKS = [
    '=HYPERLINK("http://127.0.0.1:9/x","click")',
    "+1+1",
    "-2+3",
    "@SUM(1,1)",
    "\t=1+1",
    "\r=1+1",
    "plain",
]
CATEGORY = "=cmd|' /C calc'!A0"
# A model harness: a no-model one (oracle, nop) is one participant whatever its model is called, and no
# model name of its is written (regatta_shared.rules.participants).
MODEL = {"type": "provider", "model": "=1+1:@SUM(1,1)", "api_key_secret": "KEY"}
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def hostile_run(gw: Gateway) -> str:
    gw.benchmark("hostile", TASKS, categories={task: CATEGORY for task in TASKS})
    response = gw.cli("POST", "/environment-secrets", json={"name": "KEY", "value": "k", "scope": "user"})
    assert response.status_code in (200, 201), response.text
    config = demo_config("hostile")
    for agent in config["agents"]:
        agent["harness"], agent["model"] = "codex", MODEL
    run = gw.submit(config)
    gw.progress(run["id"])
    return run["id"]


def downloaded(gw: Gateway, run_id: str, path: str) -> list[dict[str, str]]:
    manifest = gw.ok(gw.v1("GET", f"/runs/{run_id}/downloads?types=summary,results"))
    [url] = [f["url"] for f in manifest["files"] if f["path"] == path]
    response = gw.client.get(url, headers={"Authorization": ""})
    assert response.status_code == 200, response.text
    return list(csv.DictReader(io.StringIO(response.text, newline="")))


def formula_cells(rows: list[dict[str, str]]) -> list[str]:
    """Cells a spreadsheet would run as a formula: text starting with a formula character (a number
    such as -1.0 is shown as a number)."""
    return [
        cell
        for row in rows
        for cell in row.values()
        if cell.startswith(FORMULA_STARTS) and not is_number(cell)
    ]


def is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def test_results_csv_shows_hostile_task_category_and_model_names_as_text(gateway: Gateway) -> None:
    run_id = hostile_run(gateway)
    rows = downloaded(gateway, run_id, "results.csv")
    assert len(rows) == len(TASKS) * 2
    assert formula_cells(rows) == []
    assert sorted({row["task"] for row in rows}) == sorted(
        "'" + task if task != "plain" else task for task in TASKS
    )
    assert {row["category"] for row in rows} == {"'" + CATEGORY}
    assert {row["model"] for row in rows} == {"'=1+1:@SUM(1,1)"}


def test_summary_csv_shows_a_hostile_model_name_as_text(gateway: Gateway) -> None:
    run_id = hostile_run(gateway)
    rows = downloaded(gateway, run_id, "summary.csv")
    assert [row["model"] for row in rows] == ["'=1+1:@SUM(1,1)"] * 2
    assert formula_cells(rows) == []
    assert [row["agent"] for row in rows] == ["1", "2"]


def test_compare_csv_from_the_api_and_the_page_shows_hostile_names_as_text(gateway: Gateway) -> None:
    run_id = hostile_run(gateway)
    params: dict[str, Any] = {"a": f"{run_id}:0", "b": f"{run_id}:1"}
    api = gateway.v1("GET", "/compare", params={**params, "format": "csv"})
    page = gateway.client.get("/compare.csv", params=params, cookies={"regatta_token": ADMIN_TOKEN})
    for response in (api, page):
        assert response.status_code == 200, response.text
        rows = list(csv.DictReader(io.StringIO(response.text, newline="")))
        assert formula_cells(rows) == []
        assert sorted(row["task"] for row in rows) == sorted(
            "'" + task if task != "plain" else task for task in TASKS
        )
        # A number the platform computed stays a number, however it starts.
        assert {row["difference"] for row in rows} == {"-1.0"}
