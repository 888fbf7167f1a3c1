"""What every `regatta` command group shares: the console, `--json` and number formats."""

from __future__ import annotations

import json
import os
import sys
from typing import Annotated, Any

import typer
from regatta_shared.participants import NO_VALUE, rank_text
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
    if not metric or metric.get("value") is None:
        return NO_VALUE
    return f"{metric['value']:.1%} ({metric['ci_low']:.1%}–{metric['ci_high']:.1%})"


def pass_at_k(curve: list[dict[str, Any]] | None) -> str:
    """The last point of a pass@k curve, `67% @3`; no value without a curve (an agent with no score)."""
    last = (curve or [None])[-1]
    if not last or last.get("value") is None:
        return NO_VALUE
    return f"{last['value']:.0%} @{last['k']}"


def rank(row: dict[str, Any]) -> str:
    """`1`, `1=` for a shared rank (as on the web), no value without a rank."""
    return rank_text(row.get("rank"), bool(row.get("tied")))


def money(value: float | None) -> str:
    return "–" if value is None else f"${value:.4f}"


def secs(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}s"
