"""Issue 38, Comparison: one task's history across runs (`GET /api/v1/benchmarks/{key}/task-history` and
the task page), one task of a comparison side by side (`/compare/task`: both sides' attempts, the chosen
attempt's grading and transcript), and a comparison picked by ticking two rows (`/compare?run=&run=`,
`/compare?p=&p=`).

Runs and attempts are seeded as the scheduler and executor record them (conftest); the expected rows are
the seeded ones, in the order they were recorded. What the task history answers (its rows, paging and
refusals) is `queries/task_history.py`'s, tested on the service layer; the pages stay on HTTP.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs, urlsplit

from regatta_gateway.errors import Invalid, NotFound
from regatta_gateway.queries.task_history import task_history

from .conftest import ADMIN_TOKEN, Gateway, demo_config
from .service_support import Services, refused

TASKS = ["t1", "t2"]
TRAJECTORY = {
    "schema_version": "ATIF-v1.6",
    "steps": [
        {"step_id": 1, "source": "user", "message": "Fix </script><script>alert(1)</script> the bug"},
        {"step_id": 2, "source": "agent", "message": "Patched the parser."},
    ],
}
CTRF = {
    "results": {
        "summary": {"tests": 2, "passed": 1, "failed": 1},
        "tests": [
            {"name": "test_parses", "status": "passed", "duration": 3},
            {"name": "test_edge_case", "status": "failed", "duration": 5, "message": "expected 2"},
        ],
    }
}
ARTIFACTS = {
    "agent/trajectory.json": json.dumps(TRAJECTORY).encode(),
    "verifier/test-stdout.txt": b"1 passed, 1 failed\n",
    "verifier/ctrf.json": json.dumps(CTRF).encode(),
}


def page(gw: Gateway, path: str, **params: str):  # type: ignore[no-untyped-def]
    gw.client.cookies.clear()
    return gw.client.get(path, params=params, cookies={"regatta_token": ADMIN_TOKEN}, follow_redirects=False)


def seed(gw: Gateway | Services) -> tuple[str, str, str]:
    benchmark_id = gw.benchmark("hist", TASKS, categories={"t1": "parsing", "t2": "io"})
    first = gw.submit(demo_config("hist", execution_config={"attempts_per_task": 2}))["id"]

    # Run 1: oracle (agent 0) passes t1 only; nop (agent 1) passes nothing. Its artifacts are for the
    # side-by-side pages; the service layer has no object store, and the history never reads them.
    def passes(agent: int, task: str) -> bool:
        return agent == 0 and task == "t1"

    if isinstance(gw, Gateway):
        gw.progress(first, passes=passes, artifacts=ARTIFACTS)
    else:
        gw.progress(first, passes=passes)
    second = gw.submit(demo_config("hist"))["id"]
    # Run 2: nop passes t1 now.
    gw.progress(second, passes=lambda agent, task: task == "t1")
    return benchmark_id, first, second


def test_task_history_lists_every_attempt_at_the_task_in_time_order(services: Services) -> None:
    sv = services
    benchmark_id, first, second = seed(sv)

    def history(task: str, benchmark: str = "hist", limit: int = 50, offset: int = 0) -> dict[str, Any]:
        """As GET /api/v1/benchmarks/{key}/task-history answers, with its defaults."""
        return task_history(sv.store, sv.scope(), benchmark, task, limit, offset)

    body = history("t1")
    assert body["benchmark_id"] == benchmark_id and body["task"] == {"name": "t1", "category": "parsing"}
    got = [(r["run_id"], r["agent"], r["attempt_index"], r["outcome"], r["reward"]) for r in body["attempts"]]
    assert got == [
        (first, "oracle", 0, "passed", 1.0),
        (first, "oracle", 1, "passed", 1.0),
        (first, "nop", 0, "failed", 0.0),
        (first, "nop", 1, "failed", 0.0),
        (second, "oracle", 0, "passed", 1.0),
        (second, "nop", 0, "passed", 1.0),
    ]
    dates = [r["at"] for r in body["attempts"]]
    assert dates == sorted(dates) and all(dates)
    assert [r["agent_index"] for r in body["attempts"]] == [0, 0, 1, 1, 0, 1]
    assert body["summary"] == {
        "attempts": 6,
        "scored": 6,
        "passed": 4,
        "outcomes": {"failed": 2, "passed": 4},
    }
    assert (body["total_count"], body["has_more"], body["next_offset"]) == (6, False, None)
    run_name = sv.run(second)["benchmark_run"]["name"]
    assert body["attempts"][-1]["run_name"] == run_name

    # Paged: the same rows, four then two.
    one = history("t1", limit=4)
    two = history("t1", limit=4, offset=4)
    assert (one["has_more"], one["next_offset"], two["has_more"]) == (True, 4, False)
    assert [r["attempt_id"] for r in one["attempts"] + two["attempts"]] == [
        r["attempt_id"] for r in body["attempts"]
    ]

    # Refusals name the field and the problem (the route's default for a missing `task` is "").
    assert refused(lambda: history(""), Invalid).field == "task"
    assert refused(lambda: history("t1\x1b[2J"), Invalid).field == "task"
    assert refused(lambda: history("t9"), NotFound).field == "task"
    refused(lambda: history("t1", benchmark="nope"), NotFound)


def test_the_task_page_shows_the_history_and_each_attempt_links_it(gateway: Gateway) -> None:
    gw = gateway
    benchmark_id, _, _ = seed(gw)
    body = gw.ok(gw.v1("GET", "/benchmarks/hist/task-history", params={"task": "t1"}))
    missing = gw.v1("GET", "/benchmarks/hist/task-history")
    assert missing.status_code == 400 and missing.json()["field"] == "task"

    # The task page shows the same rows, each linking its run and its attempt.
    shown = page(gw, f"/benchmarks/{benchmark_id}/task", name="t1")
    assert shown.status_code == 200, shown.text
    assert shown.text.count("<tr data-attempt-id=") == 6
    for row in body["attempts"]:
        assert f'href="/benchmarks/runs/{row["run_id"]}/attempts/{row["attempt_id"]}"' in shown.text
    assert "passed 4 of 6 scored" in shown.text
    assert page(gw, f"/benchmarks/{benchmark_id}/task", name="t9").status_code == 404
    # Each attempt's page links the history of its task.
    last = body["attempts"][-1]
    attempt_page = page(gw, f"/benchmarks/runs/{last['run_id']}/attempts/{last['attempt_id']}")
    assert attempt_page.status_code == 200
    assert f'href="/benchmarks/{benchmark_id}/task?name=t1"' in attempt_page.text


def test_a_task_side_by_side_shows_both_sides_attempts_grading_and_transcript(gateway: Gateway) -> None:
    gw = gateway
    benchmark_id, first, second = seed(gw)
    a, b = f"{first}:0", f"{first}:1"
    shown = page(gw, "/compare/task", a=a, b=b, task="t1")
    assert shown.status_code == 200, shown.text
    html = shown.text
    # Both sides, each with its two attempts; the first ended attempt of each is the one shown.
    attempts = gw.ok(gw.v1("GET", f"/runs/{first}/attempts", params={"task": "t1"}))["attempts"]
    by_agent = {(x["agent_index"], x["attempt_index"]): x["attempt_id"] for x in attempts}
    for key in by_agent.values():
        assert f'data-attempt-id="{key}"' in html
    assert html.count('aria-current="true"') == 2
    assert f'href="/benchmarks/runs/{first}/attempts/{by_agent[(0, 0)]}"' in html
    assert f'href="/benchmarks/runs/{first}/attempts/{by_agent[(1, 0)]}"' in html
    # Grading of each: outcome, the failed test listed with its message, the verifier output.
    assert html.count('data-testid="grading"') == 2
    assert 'id="grading-a-title"' in html and 'id="grading-b-title"' in html
    assert html.count("test_edge_case") == 2 and html.count("expected 2") == 2
    assert html.count("1 passed, 1 failed") == 2
    # The trajectory is embedded as JSON for the page's renderer, its markup escaped.
    assert html.count('type="application/json" id="transcript-data-') == 2
    assert "</script><script>alert(1)" not in html
    assert "\\u003c/script\\u003e" in html
    assert 'data-testid="task-verdict" class="badge verdict-regressed"' in html

    # Each side's other attempt is a link that keeps the other side's choice.
    links = [
        parse_qs(urlsplit(part.split('"')[0].replace("&amp;", "&")).query)
        for part in html.split('href="')[1:]
        if part.startswith("/compare/task?")
    ]
    assert sorted((q["a_attempt"][0], q["b_attempt"][0]) for q in links) == sorted(
        [(by_agent[(0, 1)], by_agent[(1, 0)]), (by_agent[(0, 0)], by_agent[(1, 1)])]
    )
    again = page(gw, "/compare/task", a=a, b=b, task="t1", b_attempt=by_agent[(1, 1)])
    assert again.status_code == 200
    assert f'<tr data-attempt-id="{by_agent[(1, 1)]}" class="is-chosen"' in again.text

    # Refused: an attempt of the other side, a task neither ran, two benchmark versions' worth of nothing.
    wrong = page(gw, "/compare/task", a=a, b=b, task="t1", b_attempt=by_agent[(0, 0)])
    assert wrong.status_code == 404 and "b_attempt" in wrong.text
    assert page(gw, "/compare/task", a=a, b=b, task="t9").status_code == 404
    assert page(gw, "/compare/task", a=a, b=b, task="").status_code == 400
    assert page(gw, "/compare/task", a="nope", b=b, task="t1").status_code == 400

    # Across two runs of one version: run 2's nop made one attempt at t1, and passed it.
    across = page(gw, "/compare/task", a=f"{first}:1", b=f"{second}:1", task="t1")
    assert across.status_code == 200, across.text
    assert across.text.count("<tr data-attempt-id=") == 3
    assert 'data-testid="task-verdict" class="badge verdict-improved"' in across.text

    # A trajectory that is not JSON is named as such; without one, the agent's text log is the transcript,
    # shown as text (its terminal escapes dropped, its markup escaped).
    broken = gw.submit(demo_config("hist"))["id"]
    gw.progress(broken, artifacts={"agent/trajectory.json": b'{"steps": [', "agent/z.txt": b"unused"})
    logged = gw.submit(demo_config("hist"))["id"]
    gw.progress(logged, artifacts={"agent/oracle.txt": b"\x1b[31mran <b>solve.sh</b>\x1b[0m\n"})
    shown = page(gw, "/compare/task", a=f"{broken}:0", b=f"{logged}:0", task="t1")
    assert shown.status_code == 200, shown.text
    assert "agent/trajectory.json is not valid JSON" in shown.text
    assert 'data-testid="transcript-text"' in shown.text
    assert "ran &lt;b&gt;solve.sh&lt;/b&gt;" in shown.text and "\x1b" not in shown.text

    # The comparison's task names link here.
    compared = page(gw, "/compare", a=a, b=b)
    assert compared.status_code == 200
    assert f'href="/compare/task?a={first}%3A0&amp;b={first}%3A1&amp;task=t1"' in compared.text
    assert benchmark_id in compared.text


def test_two_ticked_rows_open_their_comparison(gateway: Gateway) -> None:
    gw = gateway
    _, first, second = seed(gw)
    # Two runs, in either order: the older run is A, each run's first agent.
    for picks in ([second, first], [first, second]):
        response = gw.client.get(
            "/compare",
            params={"run": picks},
            cookies={"regatta_token": ADMIN_TOKEN},
            follow_redirects=False,
        )
        assert response.status_code == 303, response.text
        query = parse_qs(urlsplit(response.headers["location"]).query)
        assert query == {"a": [f"{first}:0"], "b": [f"{second}:0"]}
    # Two leaderboard rows (participants), in the order ticked.
    response = gw.client.get(
        "/compare",
        params={"p": [f"{second}:1", f"{first}:0"]},
        cookies={"regatta_token": ADMIN_TOKEN},
        follow_redirects=False,
    )
    assert response.status_code == 303
    assert parse_qs(urlsplit(response.headers["location"]).query) == {
        "a": [f"{second}:1"],
        "b": [f"{first}:0"],
    }
    # One, three or the same run twice: refused, naming the field.
    for params in ({"run": [first]}, {"run": [first, first]}, {"p": [f"{first}:0"]}):
        refused = gw.client.get(
            "/compare", params=params, cookies={"regatta_token": ADMIN_TOKEN}, follow_redirects=False
        )
        assert refused.status_code == 400, (params, refused.status_code)
        assert "Select exactly two" in refused.text
    three = gw.client.get(
        "/compare",
        params={"run": [first, second, first, second]},
        cookies={"regatta_token": ADMIN_TOKEN},
        follow_redirects=False,
    )
    assert three.status_code == 400 and "Select exactly two runs" in three.text
    # A run this workspace does not have is not found, so nothing is redirected to.
    unknown = gw.client.get(
        "/compare",
        params={"run": [first, "run_0000000000000000"]},
        cookies={"regatta_token": ADMIN_TOKEN},
        follow_redirects=False,
    )
    assert unknown.status_code == 404 and "run_0000000000000000" in unknown.text
    bad = gw.client.get(
        "/compare",
        params={"p": ["x", f"{first}:0"]},
        cookies={"regatta_token": ADMIN_TOKEN},
        follow_redirects=False,
    )
    assert bad.status_code == 400 and "RUN:AGENT_INDEX" in bad.text
