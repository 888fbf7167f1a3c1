"""What every `regatta` command group shares: the console, `--json` and number formats."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console

console = Console()
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON")]


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
