"""What every `regatta` command group shares: the console, `--json` and number formats."""

from __future__ import annotations

import json
import os
import sys
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table


def _console() -> Console:
    # Piped output is read by scripts and people alike: one line per row, as wide as its values, unless
    # the caller set COLUMNS. A terminal keeps its width, and table() folds what does not fit.
    if sys.stdout.isatty() or os.environ.get("COLUMNS"):
        return Console()
    return Console(width=4096)


console = _console()
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON")]


def folding_table(*headers: str, **options: Any) -> Table:
    """A table that never cuts a value: what does not fit its column folds onto the next line."""
    made = Table(**options)
    for header in headers:
        made.add_column(header, overflow="fold")
    return made


def print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2))


def pct(metric: dict[str, Any] | None) -> str:
    if not metric:
        return "–"
    return f"{metric['value']:.1%} ({metric['ci_low']:.1%}–{metric['ci_high']:.1%})"


def money(value: float | None) -> str:
    return "–" if value is None else f"${value:.4f}"


def secs(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}s"
