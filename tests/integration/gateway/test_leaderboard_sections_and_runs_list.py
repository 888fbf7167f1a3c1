"""Issue 19 items 6–8 through the API: leaderboard sections with their own ranks in the chosen sort, the
recommended set (whatever its name) as the only set that ranks, per-task figures that mean the mean per
attempt everywhere, and the runs list's paging, filters and task selection.

Attempts are seeded (conftest `progress`); scores and leaderboards come from the real scoring code.
What the leaderboard, run and runs-list queries answer is tested on the service layer; the figures as the
CLI body and summary.csv show them, and the runs list's query bounds (FastAPI's), stay on HTTP.
"""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest
from regatta_gateway.errors import Invalid
from regatta_gateway.queries.benchmarks import benchmark_detail
from regatta_gateway.queries.runs import list_runs
from regatta_shared.events import BenchmarkMetadata, Timings, Usage

from .conftest import Gateway, demo_config
from .service_support import Services, refused
from .test_cli_downloads import fetch, urls_for

TASKS = [f"t{i}" for i in range(12)]
# Six tasks: one agent passing all and one none differ at p = 0.03125 (statistics.md §4), so ranks 1 and 2.
SETS = BenchmarkMetadata(task_sets={"quick": TASKS[:6], "parity": TASKS[6:9]}, recommended_task_set="quick")


def cheap_nop(agent: int, _task: str, _index: int) -> tuple[Usage, Timings]:
    """Agent 0 (oracle) costs $0.04 and 1000 tokens an attempt and takes 30 s; agent 1 (nop) a tenth."""
    scale = 1.0 if agent == 0 else 0.1
    used = Usage(input_tokens=int(900 * scale), output_tokens=int(100 * scale), cost_usd=0.04 * scale)
    return used, Timings(total=30.0 * scale)


def board(gw: Gateway, benchmark_id: str, sort: str = "pass_at_1") -> dict[str, Any]:
    return gw.ok(gw.v1("GET", f"/benchmarks/{benchmark_id}/leaderboard", params={"sort": sort}))


def shown(body: dict[str, Any]) -> list[tuple[str, str, int]]:
    return [(row["section"]["task_set"], row["harness"], row["rank"]) for row in body["leaderboard"]]


def test_one_ranking_of_every_group_in_the_chosen_sort_and_only_the_recommended_set_ranks(
    services: Services,
) -> None:
    """Issue 28: the full list's and the recommended set's rows are one ranking (statistics.md §6); the
    tests that can tie rows run only inside a group, so rows of two groups are never tied."""
    sv = services
    benchmark_id = sv.benchmark("sets", TASKS, metadata=SETS)
    detail = benchmark_detail(sv.store, sv.scope(), benchmark_id)["benchmark"]
    assert {s["name"]: s["recommended"] for s in detail["task_sets"]} == {"parity": False, "quick": True}

    full = sv.submit(demo_config("sets"))
    sv.progress(full["id"], usage=cheap_nop)  # oracle passes everything, nop nothing
    quick = sv.submit(demo_config("sets", tasks_config={"task_set": "quick"}))
    sv.progress(quick["id"], passes=lambda agent, _task: agent == 1, usage=cheap_nop)
    parity = sv.submit(demo_config("sets", tasks_config={"task_set": "parity"}))
    sv.progress(parity["id"], usage=cheap_nop)

    # By pass@1: the two perfect rows share rank 1 (neither beats the other) without a tie; each 0% row
    # is beaten by its own group's top (12 and 6 discordant tasks: Holm rejects) and by the other group's
    # (a higher estimate in another group always ranks above). Display order: rank, estimate, name.
    by_pass = sv.leaderboard(benchmark_id)
    assert shown(by_pass) == [
        ("quick", "nop", 1),
        ("full", "oracle", 1),
        ("full", "nop", 3),
        ("quick", "oracle", 3),
    ]
    assert [row["tied"] for row in by_pass["leaderboard"]] == [False] * 4
    comparisons = [row["comparison"] for row in by_pass["leaderboard"]]
    assert [c["comparable"] for c in comparisons] == [False, True, True, False]
    assert comparisons[2]["p_holm"] == 2 / 2**12 and comparisons[3]["p_value"] is None
    assert [(s["task_set"], s["recommended"], s["row_count"]) for s in by_pass["sections"]] == [
        ("quick", True, 2),
        ("full", False, 2),
    ]
    # Lower is better, one plain ordering of every row.
    by_cost = sv.leaderboard(benchmark_id, "cost_per_task")
    assert shown(by_cost) == [
        ("quick", "nop", 1),
        ("full", "nop", 2),
        ("full", "oracle", 3),
        ("quick", "oracle", 4),
    ]
    by_time = sv.leaderboard(benchmark_id, "time_per_task")
    assert [r["harness"] for r in by_time["leaderboard"]] == ["nop", "nop", "oracle", "oracle"]
    assert parity["id"] not in {row["run_id"] for row in by_pass["leaderboard"]}, (
        "a set named parity that the benchmark does not recommend never ranks"
    )

    why = sv.run(parity["id"])["leaderboard_qualification"]
    assert why["qualifies"] is False
    assert why["reasons"] == [
        "task set 'parity' is neither the full task list nor the recommended set 'quick'"
    ]
    assert sv.run(quick["id"])["leaderboard_qualification"]["qualifies"] is True
    refused(lambda: sv.leaderboard(benchmark_id, "nope"), Invalid)


def test_a_benchmark_without_a_recommended_set_ranks_full_runs_only(services: Services) -> None:
    sv = services
    metadata = BenchmarkMetadata(task_sets={"parity": ["t0", "t1"]})
    benchmark_id = sv.benchmark("plain", TASKS, metadata=metadata)
    run = sv.submit(demo_config("plain", tasks_config={"task_set": "parity"}))
    sv.progress(run["id"])
    assert sv.leaderboard(benchmark_id)["leaderboard"] == []
    reasons = sv.run(run["id"])["leaderboard_qualification"]["reasons"]
    assert reasons == ["task set 'parity' is not the full task list (this benchmark recommends no set)"]


def test_cost_tokens_and_time_per_task_are_the_mean_per_attempt_everywhere(gateway: Gateway) -> None:
    """3 attempts per task on 12 tasks: per task means per attempt, so the figures equal one attempt's
    ($0.04, 1000 tokens, 30 s for oracle), not three attempts' sum ($0.12, 3000 tokens)."""
    gw = gateway
    benchmark_id = gw.benchmark("thrice", TASKS)
    run = gw.submit(demo_config("thrice", execution_config={"attempts_per_task": 3}))
    gw.progress(run["id"], usage=cheap_nop)
    expected = {
        "oracle": (pytest.approx(0.04), pytest.approx(1000.0), pytest.approx(30.0)),
        "nop": (pytest.approx(0.004), pytest.approx(100.0), pytest.approx(3.0)),
    }

    detail = gw.ok(gw.v1("GET", f"/runs/{run['id']}"))
    harness = {a["agent_index"]: a["harness"] for a in detail["agents"]}
    metrics = {
        harness[m["agent_index"]]: (m["cost_per_task"], m["tokens_per_task"], m["mean_duration_seconds"])
        for m in detail["agent_metrics"]
    }
    assert metrics == expected
    aggregates = {
        a["harness"]: (a["aggregates"]["tokens_per_task"], a["aggregates"]["mean_duration_seconds"])
        for a in detail["agents"]
    }
    assert aggregates == {name: figures[1:] for name, figures in expected.items()}
    assert {a["harness"]: a["aggregates"]["reported_cost_usd"] for a in detail["agents"]} == {
        "oracle": pytest.approx(0.04 * 36),
        "nop": pytest.approx(0.004 * 36),
    }

    rows = board(gw, benchmark_id)["leaderboard"]
    assert {
        r["harness"]: (r["cost_per_task"], r["tokens_per_task"], r["mean_duration_seconds"]) for r in rows
    } == (expected)

    cli = gw.ok(gw.cli("GET", f"/benchmark-runs/{run['id']}"))
    assert {
        harness[m["agent_index"]]: (m["cost_per_task"], m["tokens_per_task"], m["mean_duration_seconds"])
        for m in cli["agent_metrics"]
    } == expected

    manifest = gw.ok(gw.cli("GET", f"/benchmark-runs/{run['id']}/outputs/manifest?types=summary"))
    url = urls_for(gw, run["id"], manifest["files"])["summary.csv"]
    summary = {
        row["harness"]: (
            float(row["cost_per_task_usd"]),
            float(row["tokens_per_task"]),
            float(row["time_per_task_seconds"]),
        )
        for row in csv.DictReader(io.StringIO(fetch(gw, url).text))
    }
    assert summary == expected


def test_the_runs_list_pages_past_50_filters_and_shows_each_task_selection(services: Services) -> None:
    sv = services
    benchmark_id = sv.benchmark(
        "many", TASKS, metadata=SETS, categories={"t0": "math", "t1": "math", "t2": "text"}
    )
    other = sv.member("default", "bea@example.com")
    chosen = [
        {},
        {"task_set": "quick"},
        {"categories": ["math"]},
        {"task_names": ["t4", "t5"]},
    ]
    submitted = []
    for index in range(55):
        extra = {"tasks_config": chosen[index % 4]} if chosen[index % 4] else {}
        scope = sv.scope(other) if index % 5 == 0 else None
        submitted.append(sv.submit(demo_config("many", name=f"run-{index:02d}", **extra), scope))
    for run in submitted[:3]:
        sv.progress(run["id"])
    sv.settle()

    def runs(limit: int = 50, offset: int = 0, **filters: Any) -> dict[str, Any]:
        """As GET /api/v1/runs?benchmark=... answers, with its defaults (limit 50, offset 0)."""
        return list_runs(
            sv.store, sv.scope(), limit, offset, benchmark_id, sv.settings.gateway_url, **filters
        )

    first = runs()
    assert (first["total_count"], len(first["benchmark_runs"]), first["has_more"], first["next_offset"]) == (
        55,
        50,
        True,
        50,
    )
    second = runs(offset=50)
    assert [r["name"] for r in second["benchmark_runs"]] == [f"run-{i:02d}" for i in range(4, -1, -1)]
    assert second["has_more"] is False

    selections = {r["name"]: r["task_selection"] for r in first["benchmark_runs"] + second["benchmark_runs"]}
    assert selections["run-00"] == {"kind": "all", "task_count": 12}
    assert selections["run-01"] == {"kind": "task_set", "task_set": "quick", "task_count": 6}
    assert selections["run-02"] == {"kind": "categories", "categories": ["math"], "task_count": 2}
    assert selections["run-03"] == {
        "kind": "task_names",
        "task_names": ["t4", "t5"],
        "task_name_count": 2,
        "task_count": 2,
    }

    finished = runs(status="finished")
    assert sorted(r["name"] for r in finished["benchmark_runs"]) == ["run-00", "run-01", "run-02"]
    assert finished["total_count"] == 3
    pending = runs(status="pending", limit=200)
    assert pending["total_count"] == 52

    mine = runs(submitter="bea@example.com", limit=200)
    assert sorted(r["name"] for r in mine["benchmark_runs"]) == [f"run-{i:02d}" for i in range(0, 55, 5)]
    name = mine["benchmark_runs"][0]["creator_name"]
    assert runs(submitter=name, limit=200)["total_count"] == 11
    assert runs(submitter="bea@example.com", status="finished")["total_count"] == 1
    assert runs(submitter="nobody@example.com")["total_count"] == 0


def test_the_runs_list_refuses_an_unknown_status_and_an_overlong_submitter(gateway: Gateway) -> None:
    """Both bounds are the route's (the RunStatus enum, Query max_length): a request's decoding."""
    gw = gateway
    for field, value in (("status", "done"), ("submitter", "x" * 301)):
        refusal = gw.v1("GET", "/runs", params={field: value})
        assert refusal.status_code == 400 and field in refusal.text, refusal.text
