"""The CLI writes a shared rank as the web does, `1=` (issue 38), names an agent as every page does, and
an agent with no score has no value, not "@– 0%": the real CLI in a subprocess against the served gateway."""

from __future__ import annotations

from .conftest import Gateway, demo_config
from .test_cli_labels import regatta, url  # noqa: F401  (url: the served gateway, a fixture)
from .test_rerun_errored import _finish_with_errors


def row_of(table: str, agent: str) -> str:
    rows = [line for line in table.splitlines() if f" {agent} " in line]
    assert len(rows) == 1, table
    return rows[0]


def test_ties_read_1_equals_and_an_agent_with_no_score_shows_no_value(gateway: Gateway, url: str) -> None:  # noqa: F811
    gw = gateway
    gw.benchmark("demo", ["t1", "t2"])
    config = demo_config(execution_config={"attempts_per_task": 1})
    tied = gw.submit(config)["id"]
    gw.progress(tied, passes=lambda _agent, _task: True)  # oracle and nop pass alike: tied at 1
    # Every attempt of the oracle errors: it has no score, nop passes both tasks.
    unscored = gw.submit(config)["id"]
    _finish_with_errors(gw.store, unscored, {"t1", "t2"})
    gw.settle()

    shown = regatta(url, "run", "show", tied)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    for agent in ("oracle", "nop"):
        row = row_of(shown.stdout, agent)
        assert row.split("│")[1].strip() == "1=", row
        assert "none" not in row, "the agent's name is its identity's: no model for a no-model harness"
    assert "*" not in shown.stdout

    board = regatta(url, "benchmark", "show", "demo")
    assert board.returncode == 0, board.stdout + board.stderr
    assert [row_of(board.stdout, a).split("│")[1].strip() for a in ("oracle", "nop")] == ["1=", "1="]

    shown = regatta(url, "run", "show", unscored)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    cells = [cell.strip() for cell in row_of(shown.stdout, "oracle").split("│")[1:5]]
    assert cells == ["–", "oracle", "–", "–"], cells  # rank, agent, pass@1, pass@k
    assert row_of(shown.stdout, "nop").split("│")[4].strip() == "100% @1"
