"""`regatta benchmark …`: add (from any source kind), list, show with its leaderboard, sync, remove."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from .cli_common import JsonOpt, console, money, pct, print_json, secs
from .client import Client

benchmark = typer.Typer(no_args_is_help=True)


def _source(
    dataset: str | None,
    registry: str | None,
    folder: bool,
    git: str | None,
    ref: str | None,
    path: str | None,
) -> dict[str, Any]:
    """The `POST /benchmarks` source fields for the options given (docs/benchmarks.md); the server checks
    each field again, so this only fills in what the command line implies."""
    if folder:
        if not dataset or git or registry:
            raise typer.BadParameter("--folder takes a folder of tasks and no --git or --registry")
        return {"source_type": "folder", "path": str(Path(dataset).resolve())}
    if git:
        local = Path(git)
        repo = str(local.resolve()) if local.exists() else git
        fields = {"source_type": "git", "repo": repo, "ref": ref, "path": path, "dataset": dataset}
        # Inside the repository: a relative path, as the server reads it there.
        fields["registry_path"] = registry
        return {k: v for k, v in fields.items() if v is not None}
    if ref or path:
        raise typer.BadParameter("--ref and --path go with --git", param_hint="--ref/--path")
    if not dataset:
        raise typer.BadParameter("DATASET is required (or --git REPO)", param_hint="DATASET")
    if registry:
        if registry.startswith(("http://", "https://")):
            return {"source_type": "registry", "registry_url": registry, "dataset": dataset}
        return {"source_type": "registry", "registry_path": str(Path(registry).resolve()), "dataset": dataset}
    if "/" in dataset.partition("@")[0]:
        return {"source_type": "hub", "dataset": dataset}  # Harbor's rule: org/name is a hub package
    raise typer.BadParameter(
        "a registry dataset needs --registry (a registry.json path or URL); org/name[@ref] is a hub "
        "dataset, --folder a folder of tasks, --git REPO a git repository",
        param_hint="--registry",
    )


@benchmark.command("add")
def benchmark_add(
    dataset: Annotated[
        str | None,
        typer.Argument(
            help="name[@version] in a registry, org/name[@ref] on the hub, or a folder with --folder"
        ),
    ] = None,
    registry: Annotated[
        str | None, typer.Option(help="registry.json path or URL (with --git: its path in the repository)")
    ] = None,
    folder: Annotated[bool, typer.Option(help="DATASET is a local folder of tasks")] = False,
    git: Annotated[str | None, typer.Option(help="git repository URL or local path")] = None,
    ref: Annotated[str | None, typer.Option(help="with --git: branch, tag or commit (default HEAD)")] = None,
    path: Annotated[str | None, typer.Option(help="with --git: folder of tasks (default tasks/)")] = None,
    name: Annotated[str | None, typer.Option(help="display name")] = None,
) -> None:
    """Add a benchmark and start its sync; `regatta benchmark show KEY` follows it."""
    body: dict[str, Any] = {"name": name, **_source(dataset, registry, folder, git, ref, path)}
    created = Client().post("/benchmarks", json=body)
    console.print(f"Benchmark added: {created['id']} (syncing)")


@benchmark.command("list")
def benchmark_list(as_json: JsonOpt = False) -> None:
    data = Client().get("/benchmarks", limit=200)
    if as_json:
        return print_json(data)
    table = Table("Name", "Key", "Status", "Tasks", "Added by")
    for b in data["benchmarks"]:
        tasks = (
            str(b["task_count"])
            if b["sync_status"] == "ready"
            else (
                "unavailable"
                if b["sync_status"] == "failed"
                else f"{b['synced_task_count']}/{b['task_count']}"
            )
        )
        table.add_row(b["name"], b["source_ref"], b["sync_status"], tasks, b.get("creator_name", ""))
    console.print(table)


@benchmark.command("show")
def benchmark_show(key: str, as_json: JsonOpt = False) -> None:
    data = Client().get(f"/benchmarks/{key}")
    if as_json:
        return print_json(data)
    b = data["benchmark"]
    console.print(
        f"[bold]{b['name']}[/bold] ({b['source_ref']}) — {b['sync_status']}, {b['task_count']} tasks"
    )
    if b.get("sync_error"):
        console.print(f"[red]{b['sync_error']}[/red]")
    _leaderboard_table(data["leaderboard"])


def _leaderboard_table(rows: list[dict[str, Any]]) -> None:
    # Rows come section by section (full list, then the recommended set); ranks restart in each.
    table = Table("Tasks", "#", "Agent", "Pass@1 (95% CI)", "Pass@k", "Cost/task", "Time/task")
    for r in rows:
        p1 = r.get("pass_at_1") or {}
        pk = (r.get("pass_at_k") or [{}])[-1]
        rank = f"{r.get('rank')}{'*' if r.get('tied') else ''}"
        section = r.get("section") or {}
        task_set = section.get("task_set") or r.get("task_set") or "full"
        table.add_row(
            "full list" if task_set == "full" else f"set {task_set}",
            rank,
            f"{r['harness']} · {r['model']}",
            pct(p1),
            f"{pk.get('value', 0):.0%}",
            money(r.get("cost_per_task")),
            secs(r.get("mean_duration_seconds")),
        )
    console.print(table)


@benchmark.command("sync")
def benchmark_sync(key: str) -> None:
    Client().post(f"/benchmarks/{key}/sync")
    console.print("Sync requested")


@benchmark.command("remove")
def benchmark_remove(key: str) -> None:
    Client().request("DELETE", f"/benchmarks/{key}")
    console.print("Benchmark removed")
