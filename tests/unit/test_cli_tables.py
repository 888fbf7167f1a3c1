"""CLI tables never cut a value (issue 28): on a narrow terminal what does not fit folds onto the next
line; piped output keeps each row on one line."""

from __future__ import annotations

import re

from rich.console import Console

from regatta.cli_common import folding_table

LONG = "regatta-examples-with-a-name-longer-than-any-column-of-an-80-column-terminal"
INTERVAL = "(72.2%–100.0%)"


def _shown(width: int) -> str:
    table = folding_table("Name", "Key", "Pass@1 (95% CI)", "Tasks", "Added by")
    table.add_row(LONG, f"/srv/benchmarks/{LONG}", f"91.7% {INTERVAL}", "12", "admin@example.com")
    console = Console(width=width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(table)
    return console.export_text()


def test_a_narrow_table_folds_values_and_cuts_none() -> None:
    text = _shown(80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text
    # Read down each column: every value is there, whole, once its folded pieces are joined.
    for value in (LONG, f"/srv/benchmarks/{LONG}", INTERVAL, "admin@example.com"):
        assert _column_joined(text, value), value


def _column_joined(text: str, value: str) -> bool:
    """Whether `value` is found by joining, line after line, the pieces of one column."""
    rows = [re.split(r"[│┃]", line) for line in text.splitlines() if "│" in line or "┃" in line]
    for column in range(max(len(r) for r in rows)):
        pieces = "".join(r[column].strip() for r in rows if column < len(r))
        if value.replace(" ", "") in pieces.replace(" ", ""):
            return True
    return False


def test_a_wide_table_keeps_each_row_on_one_line() -> None:
    text = _shown(4096)
    row = next(line for line in text.splitlines() if LONG in line)
    assert f"/srv/benchmarks/{LONG}" in row and INTERVAL in row
