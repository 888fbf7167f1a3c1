"""`GET /api/v1/compare`: two participants task by task, the overall pass@1 difference and the paired test.

Every expected figure is worked out here from the definitions (docs/reference/statistics.md): per-task rates
from the seeded outcomes, pass@1 as their mean, and the two-sided sign-flip p-value by enumerating all 2^m
sign assignments of the discordant tasks; nothing is read back from the code under test.

The figures and the refusals are `queries/compare.py`'s answers (the route parses `a`/`b` with
`parse_participant` and serialises `compare`'s dict), tested on the service layer; the web page, the
benchmark page's links and the CSV download stay on HTTP.
"""

from __future__ import annotations

import csv
import io
import itertools
import math
from fractions import Fraction
from typing import Any

import pytest
from regatta_gateway.errors import Conflict, Invalid, NotFound
from regatta_gateway.principals import Scope
from regatta_gateway.queries import compare as compare_queries

from .conftest import ADMIN_TOKEN, Gateway, demo_config
from .service_support import Services, refused

TASKS = [f"t{i}" for i in range(1, 11)]
CATEGORIES = {task: ("alpha" if int(task[1:]) <= 5 else "beta") for task in TASKS}
PASSES = {
    # run 1: agent 0 passes t1, t2; agent 1 passes t2 … t9 (so b improves on t3…t9, regresses on t1).
    (1, 0): {"t1", "t2"},
    (1, 1): {f"t{i}" for i in range(2, 10)},
    # run 2 (same benchmark version): agent 0 passes t1 … t5.
    (2, 0): {f"t{i}" for i in range(1, 6)},
    (2, 1): set(),
}


def exact_sign_flip_p(a: list[Fraction], b: list[Fraction]) -> float:
    """Two-sided p of the paired sign-flip test by brute-force enumeration (statistics.md §4)."""
    diffs = [y - x for x, y in zip(a, b, strict=True) if y != x]
    if not diffs:
        return 1.0
    observed = abs(sum(diffs))
    hits = sum(
        1
        for signs in itertools.product((1, -1), repeat=len(diffs))
        if abs(sum(s * d for s, d in zip(signs, diffs, strict=True))) >= observed
    )
    return hits / 2 ** len(diffs)


def wilson(y: float, n: int) -> tuple[float, float]:
    z = 1.959963984540054
    d = 1 + z * z / n
    center = (y + z * z / (2 * n)) / d
    half = z * math.sqrt(y * (1 - y) / n + z * z / (4 * n * n)) / d
    return max(0.0, center - half), min(1.0, center + half)


def seed(gw: Gateway | Services) -> tuple[str, str, str]:
    benchmark_id = gw.benchmark("cmp", TASKS, categories=CATEGORIES)
    run1 = gw.submit(demo_config("cmp", execution_config={"attempts_per_task": 2}))
    gw.progress(run1["id"], passes=lambda agent, task: task in PASSES[(1, agent)])
    run2 = gw.submit(demo_config("cmp", execution_config={"attempts_per_task": 2}))
    gw.progress(run2["id"], passes=lambda agent, task: task in PASSES[(2, agent)])
    return benchmark_id, run1["id"], run2["id"]


def compared(sv: Services, a: str, b: str, scope: Scope | None = None) -> dict[str, Any]:
    """As GET /api/v1/compare?a=&b= answers: each side parsed, then compared."""
    return compare_queries.compare(
        sv.store,
        scope or sv.scope(),
        compare_queries.parse_participant(a, "a"),
        compare_queries.parse_participant(b, "b"),
    )


def expected(a: set[str], b: set[str]) -> tuple[list[dict[str, object]], dict[str, object]]:
    rows = []
    for task in TASKS:
        ra, rb = Fraction(task in a), Fraction(task in b)
        rows.append(
            {
                "task": task,
                "category": CATEGORIES[task],
                "a_passed": 2 * int(task in a),
                "a_scored": 2,
                "a_rate": float(ra),
                "b_passed": 2 * int(task in b),
                "b_scored": 2,
                "b_rate": float(rb),
                "difference": float(rb - ra),
                "verdict": "improved" if rb > ra else "regressed" if rb < ra else "same",
            }
        )
    scores_a = [Fraction(t in a) for t in TASKS]
    scores_b = [Fraction(t in b) for t in TASKS]
    return rows, {
        "difference": float(sum(scores_b) / 10 - sum(scores_a) / 10),
        "p_value": exact_sign_flip_p(scores_a, scores_b),
    }


def test_compare_two_agents_of_one_run_and_two_runs(services: Services) -> None:
    sv = services
    _, run1, run2 = seed(sv)
    body = compared(sv, f"{run1}:0", f"{run1}:1")
    rows, overall = expected(PASSES[(1, 0)], PASSES[(1, 1)])
    assert body["tasks"] == rows
    assert [r["task"] for r in body["tasks"] if r["verdict"] == "improved"] == [f"t{i}" for i in range(3, 10)]
    assert [r["task"] for r in body["tasks"] if r["verdict"] == "regressed"] == ["t1"]
    summary = body["summary"]
    assert (summary["improved"], summary["regressed"], summary["same"], summary["unscored"]) == (7, 1, 2, 0)
    assert summary["tasks_compared"] == 10
    assert summary["difference"] == pytest.approx(overall["difference"], abs=1e-12) == pytest.approx(0.6)
    # m = 8 discordant tasks, T = 6: p = 2 · (1 + 8) / 256.
    assert overall["p_value"] == 18 / 256
    assert summary["p_value"] == pytest.approx(overall["p_value"], abs=1e-12)
    assert summary["a_pass_at_1"]["value"] == pytest.approx(0.2)
    assert summary["b_pass_at_1"]["value"] == pytest.approx(0.8)
    assert (summary["b_pass_at_1"]["ci_low"], summary["b_pass_at_1"]["ci_high"]) == pytest.approx(
        wilson(0.8, 10), abs=1e-12
    )
    assert body["a"]["harness"] == "oracle" and body["b"]["harness"] == "nop"

    # The same agent in two runs of one benchmark version, by run name as well as by id.
    name2 = sv.run(run2)["benchmark_run"]["name"]
    cross = compared(sv, f"{run1}:0", f"{name2}:0")
    rows, overall = expected(PASSES[(1, 0)], PASSES[(2, 0)])
    assert cross["tasks"] == rows
    assert cross["summary"]["p_value"] == pytest.approx(overall["p_value"], abs=1e-12) == 0.25
    assert cross["b"]["run_id"] == run2


def test_the_compare_page_links_and_csv_show_the_same_figures(gateway: Gateway) -> None:
    gw = gateway
    benchmark_id, run1, run2 = seed(gw)
    # The web page shows the same figures; its filters narrow the rows only.
    params = {"a": f"{run1}:0", "b": f"{run1}:1", "verdict": "regressed"}
    page = gw.client.get("/compare", params=params, cookies={"regatta_token": ADMIN_TOKEN})
    assert page.status_code == 200, page.text
    assert "+60.0 pp" in page.text and "0.0703" in page.text
    assert page.text.count('data-verdict="regressed"') == 1 and 'data-verdict="improved"' not in page.text

    # The benchmark page links both: a leaderboard row against the top row (run 2's oracle, agent 0) and a
    # run against the run below it in the runs table.
    board = gw.client.get(f"/benchmarks/{benchmark_id}", cookies={"regatta_token": ADMIN_TOKEN})
    assert board.status_code == 200
    assert f'href="/compare?a={run2}%3A0&amp;b={run2}%3A1"' in board.text
    assert f'href="/compare?a={run1}%3A0&amp;b={run2}%3A0"' in board.text

    # The CSV download holds the same rows.
    response = gw.v1("GET", "/compare", params={"a": f"{run1}:0", "b": f"{run1}:1", "format": "csv"})
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/csv")
    table = list(csv.DictReader(io.StringIO(response.text)))
    assert [(r["task"], r["category"], r["a_rate"], r["b_rate"], r["verdict"]) for r in table][:4] == [
        ("t1", "alpha", "1.0", "0.0", "regressed"),
        ("t2", "alpha", "1.0", "1.0", "same"),
        ("t3", "alpha", "0.0", "1.0", "improved"),
        ("t4", "alpha", "0.0", "1.0", "improved"),
    ]
    assert len(table) == 10


def test_compare_refuses_bad_participants_other_versions_and_other_workspaces(services: Services) -> None:
    sv = services
    _, run1, _ = seed(sv)
    for bad in ("x", f"{run1}", f"{run1}:abc", f"{run1}:12345", "r" * 400 + ":0", f"{run1}:0\n"):
        assert refused(lambda bad=bad: compared(sv, bad, f"{run1}:1"), Invalid).field == "a", bad
    refused(lambda: compared(sv, f"{run1}:0", f"{run1}:7"), NotFound)

    # Another benchmark: not the same tasks, refused with the reason.
    sv.benchmark("other", TASKS)
    other = sv.submit(demo_config("other"))
    sv.progress(other["id"])
    conflict = refused(lambda: compared(sv, f"{run1}:0", f"{other['id']}:0"), Conflict)
    assert "different benchmarks" in conflict.message

    # Another workspace's run is not found, whichever side names it, by id or by name.
    sv.workspace("beta")
    bob = sv.member("beta", "bob@b.example", role="admin")
    sv.benchmark("cmp", TASKS, workspace="beta", token=bob)
    foreign = sv.submit(demo_config("cmp"), scope=sv.scope(bob, "beta"))
    sv.progress(foreign["id"])
    for key, hidden in ((foreign["id"], foreign["name"]), (foreign["name"], foreign["id"])):
        for a, b in ((f"{run1}:0", f"{key}:0"), (f"{key}:0", f"{run1}:0")):
            not_found = refused(lambda a=a, b=b: compared(sv, a, b), NotFound, "NOT_FOUND")
            assert hidden not in str(vars(not_found)), "the refusal never names the hidden run"


def test_the_api_and_the_page_refuse_bad_participants_and_hide_other_workspaces(gateway: Gateway) -> None:
    """The query's refusals as the API and the page answer them: 400 (or FastAPI's bounds), 404."""
    gw = gateway
    _, run1, _ = seed(gw)
    for bad in ("x", "r" * 400 + ":0", f"{run1}:abc"):
        response = gw.v1("GET", "/compare", params={"a": bad, "b": f"{run1}:1"})
        assert response.status_code in (400, 422), (bad, response.text)
    gw.workspace("beta")
    bob = gw.member("beta", "bob@b.example", role="admin")
    gw.benchmark("cmp", TASKS, workspace="beta", token=bob)
    foreign = gw.submit(demo_config("cmp"), workspace="beta", token=bob)
    params = {"a": f"{run1}:0", "b": f"{foreign['id']}:0"}
    response = gw.v1("GET", "/compare", params=params)
    assert response.status_code == 404 and response.json()["code"] == "NOT_FOUND", response.text
    assert foreign["name"] not in response.text
    page = gw.client.get("/compare", params=params, cookies={"regatta_token": ADMIN_TOKEN})
    assert page.status_code == 404 and foreign["name"] not in page.text


def test_compare_csv_never_starts_a_cell_with_a_formula(gateway: Gateway) -> None:
    """A task name is the benchmark author's text: in a spreadsheet `=HYPERLINK(…)` would run as a formula."""
    gw = gateway
    hostile = ['=HYPERLINK("http://127.0.0.1:9/x")', "+1+1", "-2", "@SUM(A1)", "plain"]
    gw.benchmark("hostile", hostile)
    run = gw.submit(demo_config("hostile"))
    gw.progress(run["id"])
    response = gw.v1(
        "GET", "/compare", params={"a": f"{run['id']}:0", "b": f"{run['id']}:1", "format": "csv"}
    )
    assert response.status_code == 200, response.text
    tasks = [row["task"] for row in csv.DictReader(io.StringIO(response.text))]
    assert tasks == ["'" + name for name in hostile[:4]] + ["plain"]
    web = gw.client.get(
        "/compare.csv",
        params={"a": f"{run['id']}:0", "b": f"{run['id']}:1"},
        cookies={"regatta_token": ADMIN_TOKEN},
    )
    assert web.status_code == 200 and web.text == response.text
