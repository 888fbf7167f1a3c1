"""The one CSV writer of the platform's downloads (regatta_shared.security.csv_export): text a spreadsheet
would run as a formula is written as text, and a line break inside a cell never ends its row."""

from __future__ import annotations

import csv
import io

import pytest
from regatta_shared.security.csv_export import csv_text, inert_cell


@pytest.mark.parametrize("text", ["=1+1", "+1", "-1+2", "@SUM(1,1)", "\t=1", "\r=1"])
def test_text_starting_a_formula_is_written_as_text(text: str) -> None:
    assert inert_cell(text) == "'" + text


@pytest.mark.parametrize("value", ["plain", "", " =1", "a=1", -0.5, 3, None, True])
def test_other_cells_are_left_as_they_are(value: object) -> None:
    assert inert_cell(value) == value


def test_a_carriage_return_inside_a_cell_does_not_start_a_row() -> None:
    text = csv_text(["task", "n"], [["a\r=1+1", -1.5], ["b\n@x", 2], ["\r=2", 3]])
    assert text.startswith("task,n\n") and text.endswith(",3\n")
    parsed = list(csv.reader(io.StringIO(text, newline="")))
    assert parsed == [["task", "n"], ["a\r=1+1", "-1.5"], ["b\n@x", "2"], ["'\r=2", "3"]]
