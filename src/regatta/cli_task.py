"""`regatta task try PATH`: a local task folder (or folder of tasks) as a scratch benchmark of the
workspace, run at once: `harbor run -p ./task`, on Regatta. Its runs never rank (docs/benchmarks.md)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

import typer
from rich.markup import escape

from .cli_common import JsonOpt, console, folding_table, print_json
from .cli_run import all_attempts, follow
from .client import Client, Failure
from .task_pack import PackRefused, pack_folder

task = typer.Typer(no_args_is_help=True)

SYNC_WAIT_SEC = 600.0
UPLOAD_TIMEOUT_SEC = 600.0
CHUNK = 1024 * 1024


@task.command("try")
def task_try(
    path: Annotated[Path, typer.Argument(help="A task folder, or a folder of task folders")],
    harness: Annotated[
        str, typer.Option(help="The agent's harness (oracle runs the task's solution)")
    ] = "oracle",
    model: Annotated[
        str,
        typer.Option(
            help="The agent's model: a hosted model's name, or provider/model with --api-key-secret"
        ),
    ] = "none",
    api_key_secret: Annotated[
        str | None, typer.Option(help="A secret with the provider's API key: the model is a provider's")
    ] = None,
    attempts: Annotated[int, typer.Option(min=1, max=100, help="Attempts per task")] = 1,
    name: Annotated[
        str | None, typer.Option(help="The scratch benchmark's name (default: the folder's)")
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Follow the run to its end and print each task's outcome")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Upload PATH as a scratch benchmark of the workspace and run it with one agent."""
    try:
        archive = pack_folder(path)
    except PackRefused as refused:
        raise typer.BadParameter(str(refused), param_hint="PATH") from None
    client = Client()
    with archive:
        uploaded = client.post(
            "/benchmarks/uploads",
            content=iter(lambda: archive.read(CHUNK), b""),
            params={"name": name} if name else None,
            headers={"Content-Type": "application/gzip"},
            timeout=UPLOAD_TIMEOUT_SEC,
        )
    benchmark = _synced(client, uploaded["id"])
    agent_model: dict[str, Any] = (
        {"type": "provider", "model": model, "api_key_secret": api_key_secret}
        if api_key_secret
        else {"type": "hosted", "base_model": model}
    )
    created = client.post(
        "/runs",
        json={
            "experiment_config": {"benchmark": uploaded["id"]},
            "agents": [{"harness": harness, "model": agent_model}],
            "execution_config": {"attempts_per_task": attempts},
        },
    )
    url = f"{client.url}/benchmarks/runs/{quote(created['name'], safe='')}"
    shown: dict[str, Any] = {"benchmark": _benchmark_summary(benchmark), "run": created, "url": url}
    if not as_json:
        _say_uploaded(benchmark, uploaded)
        console.print(f"Run [bold]{escape(created['name'])}[/bold]: {url}")
    if not wait:
        return print_json(shown) if as_json else None
    detail = follow(client, created["id"], quiet=as_json)
    tasks = _task_outcomes(all_attempts(client, created["id"]))
    status = detail["benchmark_run"]["status"]
    if as_json:
        print_json(
            {
                **shown,
                "status": status,
                "status_reason": detail["benchmark_run"].get("status_reason"),
                "tasks": tasks,
            }
        )
    else:
        _outcome_table(status, detail["benchmark_run"].get("status_reason"), tasks)
    if status != "finished":
        raise typer.Exit(1)
    return None


def _synced(client: Client, benchmark_id: str) -> dict[str, Any]:
    """The benchmark once its sync ended; a failed sync is the command's failure, with the reason."""
    deadline = time.monotonic() + SYNC_WAIT_SEC
    while True:
        detail = client.get(f"/benchmarks/{benchmark_id}")["benchmark"]
        if detail["sync_status"] == "ready":
            return detail
        if detail["sync_status"] == "failed":
            raise Failure(
                f"The uploaded tasks did not sync: {detail.get('sync_error') or 'no reason given'}",
                code="SYNC_FAILED",
                field="PATH",
            )
        if time.monotonic() > deadline:
            raise Failure(f"The uploaded tasks did not sync within {SYNC_WAIT_SEC:g} s", code="SYNC_TIMEOUT")
        time.sleep(0.3)


def _benchmark_summary(detail: dict[str, Any]) -> dict[str, Any]:
    invalid = [
        {"task": t["name"], "reason": t["invalid_reason"]} for t in detail["tasks"] if t.get("invalid_reason")
    ]
    return {
        "id": detail["id"],
        "name": detail["name"],
        "task_count": detail["task_count"],
        "invalid": invalid,
    }


def _say_uploaded(detail: dict[str, Any], uploaded: dict[str, Any]) -> None:
    again = " (the same files as before: its scratch benchmark again)" if uploaded.get("existing") else ""
    console.print(f"Scratch benchmark [bold]{escape(detail['name'])}[/bold] ({detail['id']}){again}")
    for task in detail["tasks"]:
        if task.get("invalid_reason"):
            # A reason quotes task.toml: never rich markup.
            console.print(f"[yellow]Not run:[/yellow] {escape(task['invalid_reason'])}")


def _task_outcomes(attempts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "task": a["task"],
            "attempt": a["attempt_index"] + 1,
            "outcome": a.get("outcome") or a.get("status") or "scheduled",
            "reward": (a.get("result") or {}).get("primary_reward"),
        }
        for a in sorted(attempts, key=lambda a: (a["task"], a["attempt_index"]))
    ]


def _outcome_table(status: str, reason: str | None, tasks: list[dict[str, Any]]) -> None:
    console.print(f"Run {status}" + (f": {escape(reason)}" if reason else ""))
    table = folding_table("Task", "#", "Outcome", "Reward")
    for row in tasks:
        reward = "–" if row["reward"] is None else f"{row['reward']:g}"
        table.add_row(escape(row["task"]), str(row["attempt"]), row["outcome"], reward)
    console.print(table)
