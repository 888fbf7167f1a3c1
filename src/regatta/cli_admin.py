"""`regatta admin …`: platform administration (platform administrators only)."""

from __future__ import annotations

from urllib.parse import quote

import typer
from rich.markup import escape

from .cli_common import JsonOpt, console, print_json
from .client import ApiFailure, Client

admin = typer.Typer(no_args_is_help=True)


def split_key(client: Client, given: str) -> tuple[str, str | None]:
    """BENCHMARK[@VERSION] as (benchmark key, version). A benchmark whose own key contains `@` (a
    registry dataset's `name@version` reference) is found whole first."""
    if "@" not in given:
        return given, None
    try:
        client.get(f"/benchmarks/{quote(given, safe='')}")
        return given, None
    except ApiFailure:
        key, version = given.rsplit("@", 1)
        return key, version or None


@admin.command("rescore")
def admin_rescore(
    benchmark: str = typer.Argument(..., metavar="BENCHMARK[@VERSION]", help="name, source or id"),
    as_json: JsonOpt = False,
) -> None:
    """Score a benchmark's runs again under the current scoring rules (only runs of VERSION, if given):
    each run scored under older rules gets new final scores, and the leaderboard ranks it again."""
    client = Client()
    key, version = split_key(client, benchmark)
    body = {"version": version} if version else {}
    requested = client.post(f"/benchmarks/{quote(key, safe='')}/rescore", json=body)
    if as_json:
        print_json(requested)
        return
    which = f"runs of version {escape(version)}" if version else "runs"
    console.print(
        f"Rescoring the {which} of {escape(key)} under scoring rules v{requested['rules_version']} "
        f"({requested['rescore_id']}); `regatta benchmark show {escape(key)}` shows the leaderboard."
    )
