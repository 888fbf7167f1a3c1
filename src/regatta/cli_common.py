"""What every `regatta` command group shares: the console, `--json` and number formats."""

from __future__ import annotations

import json
import os
import sys
from typing import Annotated, Any

import typer
from regatta_shared.rules.participants import NO_VALUE, rank_text
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .client import Failure


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


def wants_json(argv: list[str]) -> bool:
    """Whether the command line asks for JSON (`--json` can only be a flag: no option takes a value
    starting with `--` unless after `--`)."""
    return "--json" in argv[: argv.index("--")] if "--" in argv else "--json" in argv


def show_failure(error: Failure, as_json: bool) -> None:
    """A failure, the same way for every command: with `--json` one JSON document on stderr (stdout stays
    empty, so a script reading it never parses half an answer), else the message in red."""
    if as_json:
        typer.echo(json.dumps(error.as_json()), err=True)
    else:
        console.print(f"[red]Error:[/red] {escape(error.text())}")


def usage_failure(error: typer.TyperException) -> Failure:
    """Click's refusal of the command line (a bad value, a missing argument, an unknown option) as a
    failure naming the parameter at fault. (Typer vendors click: its exception classes are typer's.)"""
    field = None
    if isinstance(error, typer.BadParameter):
        hint = error.param_hint
        if isinstance(hint, str):
            field = hint.strip("'\"")
        elif hint:
            field = "/".join(hint)
        elif error.param is not None:
            field = (getattr(error.param, "opts", None) or [error.param.name or ""])[0]
    else:
        field = getattr(error, "option_name", None)  # an unknown option
    code = "VALIDATION" if isinstance(error, typer.BadParameter) else "USAGE"
    return Failure(error.format_message(), code=code, field=field)


YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation")]


def confirm_or_refuse(question: str, yes: bool) -> bool:
    """Whether to go ahead: --yes, or "y" typed at a terminal. Without a terminal to ask on, refused
    at once rather than waiting for an answer that a script will never type."""
    if yes:
        return True
    if not sys.stdin.isatty():
        raise Failure(
            f"{question} Nothing done: stdin is not a terminal, so confirm with --yes",
            code="CONFIRMATION_REQUIRED",
            field="--yes",
        )
    return typer.confirm(question, default=False)
