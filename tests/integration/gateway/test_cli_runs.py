"""`regatta run list` filters, and the confirmations of `run stop` and `benchmark remove` (issue 38): the
real CLI in a subprocess against the real gateway."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from regatta_shared.ids import run_stream

from .cli_support import regatta, regatta_on_terminal, served
from .conftest import ADMIN_TOKEN, Gateway, demo_config


@pytest.fixture
def url(gateway: Gateway) -> Iterator[str]:
    with served(gateway) as address:
        yield address


def listed(url: str, *filters: str) -> list[str]:
    result = regatta(url, "run", "list", *filters, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    return [r["id"] for r in json.loads(result.stdout)["benchmark_runs"]]


def test_run_list_filters_by_benchmark_status_and_limit(gateway: Gateway, url: str) -> None:
    gw = gateway
    gw.benchmark("demo", ["t1", "t2"])
    other_benchmark = gw.benchmark("other", ["t1"])
    finished = gw.submit(demo_config())["id"]
    gw.progress(finished)
    pending = gw.submit(demo_config())["id"]
    other = gw.submit(demo_config("other"))["id"]

    assert listed(url) == [other, pending, finished]  # newest first
    assert listed(url, "--benchmark", "demo") == [pending, finished]  # by name
    assert listed(url, "--benchmark", other_benchmark) == [other]  # by id
    assert listed(url, "--status", "finished") == [finished]
    assert listed(url, "--benchmark", "demo", "--status", "pending") == [pending]
    assert listed(url, "--limit", "2") == [other, pending]
    table = regatta(url, "run", "list", "--limit", "1")
    assert table.returncode == 0 and "1 of 3 runs shown" in table.stdout, table.stdout

    # Bad values name the option and the problem.
    for option, value, problem in (
        ("--status", "done", "must be one of pending, queued, running, finished, failed, stopped"),
        ("--limit", "0", "0 is not in the range 1<=x<=200"),
        ("--limit", "201", "201 is not in the range 1<=x<=200"),
    ):
        refused = regatta(url, "run", "list", option, value, "--json")
        assert refused.returncode == 2, refused.stdout + refused.stderr
        error = json.loads(refused.stderr)["error"]
        assert error["field"] == option and problem in error["message"], error
    unknown = regatta(url, "run", "list", "--benchmark", "no-such-benchmark", "--json")
    assert unknown.returncode == 1
    assert json.loads(unknown.stderr)["error"]["code"] == "NOT_FOUND", unknown.stderr


def stop_requested(gw: Gateway, run_id: str) -> bool:
    """Whether the run's stream holds a stop request (the run scheduler, not running here, acts on it)."""
    return any(e.type == "RunStopRequested" for e in gw.store.read_stream(run_stream(run_id)))


def test_run_stop_asks_on_a_terminal_and_refuses_without_one(gateway: Gateway, url: str) -> None:
    gw = gateway
    gw.benchmark("demo", ["t1", "t2"])
    run = gw.submit(demo_config())

    # A script (stdin not a terminal) without --yes: refused at once, nothing recorded.
    before = gw.event_count()
    piped = regatta(url, "run", "stop", run["name"], stdin="y\n")
    assert piped.returncode == 1, piped.stdout + piped.stderr
    assert "confirm with --yes" in piped.stdout and run["name"] in piped.stdout, piped.stdout
    assert gw.event_count() == before

    # A person at a terminal is asked, naming the run; "n" (or Enter) stops nothing.
    for typed in ("n\n", "\n"):
        code, shown = regatta_on_terminal(url, "run", "stop", run["name"], typed=typed)
        assert code == 1 and f"Stop run {run['name']} (pending, 0/" in shown and "[y/N]" in shown, shown
        assert "Not stopped" in shown, shown
    assert gw.event_count() == before and not stop_requested(gw, run["id"])
    code, shown = regatta_on_terminal(url, "run", "stop", run["name"], typed="y\n")
    assert code == 0 and "Stop requested" in shown, shown
    assert stop_requested(gw, run["id"])

    # --yes (or -y) asks nothing.
    second = gw.submit(demo_config())
    stopped = regatta(url, "run", "stop", second["id"], "-y")
    assert stopped.returncode == 0 and "Stop requested" in stopped.stdout, stopped.stdout + stopped.stderr
    assert stop_requested(gw, second["id"])


def test_benchmark_remove_asks_on_a_terminal_and_refuses_without_one(gateway: Gateway, url: str) -> None:
    gw = gateway
    for name in ("kept", "gone", "scripted"):
        gw.benchmark(name, ["t1"])

    def names() -> list[str]:
        return sorted(b["name"] for b in gw.ok(gw.v1("GET", "/benchmarks"))["benchmarks"])

    piped = regatta(url, "benchmark", "remove", "kept")
    assert piped.returncode == 1 and "confirm with --yes" in piped.stdout, piped.stdout + piped.stderr
    code, shown = regatta_on_terminal(url, "benchmark", "remove", "kept", typed="n\n")
    assert code == 1 and "Remove benchmark kept (/srv/benchmarks/kept)? [y/N]" in shown, shown
    assert names() == ["gone", "kept", "scripted"]

    code, shown = regatta_on_terminal(url, "benchmark", "remove", "gone", typed="y\n")
    assert code == 0 and "Benchmark removed" in shown, shown
    removed = regatta(url, "benchmark", "remove", "scripted", "--yes")
    assert removed.returncode == 0, removed.stdout + removed.stderr
    gw.settle()
    assert names() == ["kept"]


def column(table: str, header: str, row_key: str) -> str:
    """The cell under `header` in the table row holding `row_key` (one line a row when piped)."""
    lines = table.splitlines()
    head = next(line for line in lines if header in line and ("│" in line or "┃" in line))
    index = [cell.strip() for cell in head.replace("┃", "│").split("│")].index(header)
    (row,) = [line for line in lines if row_key in line]
    return [cell.strip() for cell in row.split("│")][index]


def test_agents_are_numbered_from_1_wherever_people_read_them(gateway: Gateway, url: str) -> None:
    gw = gateway
    gw.benchmark("demo", ["t1", "t2"])
    run = gw.submit(demo_config(execution_config={"attempts_per_task": 1}))  # oracle, then nop
    gw.progress(run["id"])
    attempts = gw.ok(gw.v1("GET", f"/runs/{run['id']}/attempts"))["attempts"]
    assert sorted({a["agent_index"] for a in attempts}) == [0, 1]  # the API's index keeps counting from 0

    table = regatta(url, "run", "attempts", run["id"])
    assert table.returncode == 0, table.stdout + table.stderr
    for attempt in attempts:
        assert column(table.stdout, "Agent", attempt["attempt_id"]) == str(attempt["agent_index"] + 1)
    # The same number as the run's log says for that agent.
    logs = regatta(url, "run", "logs", run["id"], "--limit", "200").stdout
    assert "(agent 1)" in logs and "(agent 2)" in logs and "(agent 0)" not in logs, logs

    # compare: RUN means its first agent, RUN:2 its second; the API answers with their 0-based indexes.
    shown = regatta(url, "run", "compare", run["name"], f"{run['name']}:2")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert f"A: {run['name']} agent 1 (oracle)" in shown.stdout, shown.stdout
    assert f"B: {run['name']} agent 2 (nop)" in shown.stdout, shown.stdout
    as_json = json.loads(regatta(url, "run", "compare", f"{run['id']}:1", f"{run['id']}:2", "--json").stdout)
    assert (as_json["a"]["agent_index"], as_json["b"]["agent_index"]) == (0, 1)
    assert (as_json["a"]["harness"], as_json["b"]["harness"]) == ("oracle", "nop")
    zero = regatta(url, "run", "compare", f"{run['id']}:0", run["id"], "--json")
    error = json.loads(zero.stderr)["error"]
    assert zero.returncode == 2 and error["field"] == "A" and "agent numbers start at 1" in error["message"]
    beyond = regatta(url, "run", "compare", run["id"], f"{run['id']}:3", "--json")
    error = json.loads(beyond.stderr)["error"]
    assert beyond.returncode == 1 and (error["code"], error["field"]) == ("NOT_FOUND", "b"), error
    assert "no agent_index 2 (agent 3); it has 2 agents" in error["message"], error

    # The web's compare page names the agents the same way.
    both = {"a": f"{run['id']}:0", "b": f"{run['id']}:1"}
    page = gw.client.get("/compare", params=both, cookies={"regatta_token": ADMIN_TOKEN})
    assert page.status_code == 200
    text = " ".join(page.text.split())
    assert "agent 1 of" in text and "agent 2 of" in text and "agent 0 of" not in text
