"""CSV the platform writes for people, who open it in a spreadsheet: run downloads and comparisons.

Many cells are someone else's text (a task named by a benchmark's author, a model or a label named by a
member). A spreadsheet runs a text cell that starts with `=`, `+`, `-` or `@` as a formula, and one
that starts with a tab or a carriage return too (OWASP, "CSV Injection"), so such a cell is written
with a leading `'`, which spreadsheets show as text. Numbers are written as they are: the platform
computed them, and `-0.5` must stay a number.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from itertools import chain
from typing import Any

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def inert_cell(value: Any) -> Any:
    """`value`, with a `'` in front when it is text a spreadsheet would run as a formula."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def csv_text(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A header line and one line per row, every cell made inert, `\n` line ends. A cell holding a
    carriage return is quoted like one holding a line feed: unquoted, a reader would end the row there
    and read the rest as a new row, whose first cell nobody made inert."""
    buffer = io.StringIO()
    # csv quotes a cell holding any character of the line terminator: with "\r\n" a bare "\r" is quoted
    # too. Each record's own "\r\n" is then written as "\n".
    writer = csv.writer(buffer, lineterminator="\r\n")
    lines = []
    for row in chain([header], rows):
        writer.writerow([inert_cell(cell) for cell in row])
        lines.append(buffer.getvalue().removesuffix("\r\n") + "\n")
        buffer.seek(0)
        buffer.truncate()
    return "".join(lines)
