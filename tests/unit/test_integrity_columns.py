"""An attempt's evidence as its row's columns (regatta_shared.runs.integrity): what every count, filter and
results.csv cell reads, so one rule decides what "unexplained" and the rest count."""

from __future__ import annotations

from regatta_shared.events.integrity import AgentProcess, AttemptIntegrity, Explanation, ToolChainChange
from regatta_shared.runs import INTEGRITY_COLUMNS, integrity_columns, integrity_summary


def columns(evidence: object) -> tuple[object, ...]:
    found = integrity_columns({"integrity": evidence})
    return tuple(found[c] for c in INTEGRITY_COLUMNS)


def test_an_environment_that_does_not_look_leaves_every_column_empty() -> None:
    assert columns(None) == (None, None, None, None)
    assert integrity_columns({}) == dict.fromkeys(INTEGRITY_COLUMNS)
    assert integrity_summary(dict.fromkeys(INTEGRITY_COLUMNS)) is None


def test_not_looked_and_unreadable_evidence_count_nothing() -> None:
    assert columns(AttemptIntegrity(checked=False, unexplained=3).model_dump()) == (False, None, None, None)
    # A shape this code cannot read never stops a fold: it reads as not looked at.
    assert columns({"checked": True, "unexplained": -1, "surprise": 1}) == (False, None, None, None)


def test_counts_are_the_totals_and_never_fewer_than_the_lists_name() -> None:
    changes = [
        ToolChainChange(path="/usr/bin/a", change="added"),
        ToolChainChange(path="/usr/bin/b", change="changed"),
        ToolChainChange(path="/usr/bin/c", change="deleted"),  # a deletion runs nothing
        ToolChainChange(path="/d", change="added", explained_by=Explanation(source="pip", package="d")),
    ]
    listed = AttemptIntegrity(
        changes=changes,
        processes=[AgentProcess(pid=9, name="sleep")],
        verifier_files_written=["/tests/test.sh", "/logs/verifier/reward.txt"],
    )
    assert columns(listed.model_dump()) == (True, 2, 1, 2)
    totals = AttemptIntegrity(changes=changes[:1], unexplained=40, processes_total=7)
    assert columns(totals.model_dump()) == (True, 40, 7, 0)
    row = integrity_columns({"integrity": totals.model_dump()})
    assert integrity_summary(row) == {
        "checked": True,
        "unexplained": 40,
        "processes_alive": 7,
        "verifier_files_written": 0,
    }
