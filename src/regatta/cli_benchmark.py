"""`regatta benchmark …`: add (from any source kind), list, show with its leaderboard, sync, remove."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn
from urllib.parse import quote

import typer
from regatta_shared.rules.participants import agent_label
from rich.text import Text

from .cli_common import (
    JsonOpt,
    YesOpt,
    confirm_or_refuse,
    console,
    folding_table,
    money,
    pass_at_k,
    pct,
    print_json,
    rank,
    secs,
)
from .client import Client

benchmark = typer.Typer(no_args_is_help=True)


MAX_REGISTRY_BYTES = 32 * 1024 * 1024


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
        if not Path(dataset).is_dir():
            # The server reads the folder later, at sync: refused now rather than added and failed then.
            raise typer.BadParameter(f"{dataset} is not a folder", param_hint="DATASET")
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
        raise typer.BadParameter(
            "name the dataset: regatta benchmark add NAME[@VERSION] "
            "(or --git REPO, or a folder with --folder)",
            param_hint="DATASET",
        )
    if registry:
        if registry.startswith(("http://", "https://")):
            return {"source_type": "registry", "registry_url": registry, "dataset": dataset}
        return {"source_type": "registry", "registry_path": str(Path(registry).resolve()), "dataset": dataset}
    if "/" in dataset.partition("@")[0]:
        return {"source_type": "hub", "dataset": dataset}  # Harbor's rule: org/name is a hub package
    # A bare name: the server's default registry (REGATTA_DEFAULT_REGISTRY, Harbor's unless set).
    return {"source_type": "registry", "dataset": dataset}


def _registry_given(source: str | None, folder: bool, git: str | None) -> bool:
    """Whether the argument names a registry rather than a dataset: a URL or a file ending in .json, or a
    folder that holds a registry.json."""
    if source is None or folder or git:
        return False
    if source.startswith(("http://", "https://")):
        return True
    local = Path(source)
    return (local.is_file() and local.suffix == ".json") or (
        local.is_dir() and (local / "registry.json").is_file()
    )


def _tell(message: str) -> NoReturn:
    """A usage problem in plain lines (no box around them), so the command it suggests can be copied."""
    typer.echo(message, err=True)
    raise typer.Exit(2)


def _path_hint(source: str | None, folder: bool, git: str | None) -> None:
    """A path given as if it were a dataset name: say what to type instead."""
    if not source or folder or git:
        return
    if Path(source).is_dir():
        _tell(f"{source} is a folder. Add its tasks with:\n  regatta benchmark add {source} --folder")
    if source.startswith(("/", "./", "../", "~")) or source.endswith(".json"):
        _tell(
            f"{source}: no such file. Give a registry.json that exists, or a dataset by name:\n"
            "  regatta benchmark add NAME@VERSION   (the server's default registry)\n"
            "  regatta benchmark search WORDS       (to find one)"
        )


def _datasets_in(registry: str) -> list[str]:
    """`name@version` of each dataset a local registry.json lists (for asking which one to add)."""
    local = Path(registry)
    file = local / "registry.json" if local.is_dir() else local
    try:
        if file.stat().st_size > MAX_REGISTRY_BYTES:
            _tell(f"{registry} is larger than {MAX_REGISTRY_BYTES} bytes")
        rows = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        _tell(f"{registry} is not a readable registry.json ({error})")
    if not isinstance(rows, list):
        _tell(f"{registry} is not a registry.json (expected a JSON array of datasets)")
    return [
        f"{row['name']}@{row['version']}"
        for row in rows
        if isinstance(row, dict) and isinstance(row.get("name"), str) and isinstance(row.get("version"), str)
    ]


def _choose_dataset(registry: str) -> str:
    """The one dataset of the registry, the one picked at the prompt, or what to type to name one."""
    if registry.startswith(("http://", "https://")):
        _tell(
            f"Name the dataset to add from {registry}:\n"
            f"  regatta benchmark add {registry} --dataset NAME@VERSION"
        )
    datasets = _datasets_in(registry)
    if not datasets:
        _tell(f"{registry} lists no dataset")
    if len(datasets) == 1:
        return datasets[0]
    if not sys.stdin.isatty():
        listed = "\n".join(f"  regatta benchmark add {registry} --dataset {d}" for d in datasets)
        _tell(f"{registry} lists {len(datasets)} datasets. Add one of them with:\n{listed}")
    for number, name in enumerate(datasets, 1):
        typer.echo(f"  {number}. {name}")
    while True:
        choice = typer.prompt("Which dataset", type=int)
        if 1 <= choice <= len(datasets):
            return datasets[choice - 1]
        typer.echo(f"A number from 1 to {len(datasets)}, please.")


@benchmark.command("add")
def benchmark_add(
    dataset: Annotated[
        str | None,
        typer.Argument(
            help="name[@version] in the default registry, org/name[@ref] on the hub, a registry.json "
            "(path or URL), or a folder with --folder"
        ),
    ] = None,
    registry: Annotated[
        str | None, typer.Option(help="registry.json path or URL (with --git: its path in the repository)")
    ] = None,
    dataset_option: Annotated[
        str | None,
        typer.Option("--dataset", help="with a registry: the dataset to add, NAME[@VERSION]"),
    ] = None,
    folder: Annotated[bool, typer.Option(help="DATASET is a local folder of tasks")] = False,
    git: Annotated[str | None, typer.Option(help="git repository URL or local path")] = None,
    ref: Annotated[str | None, typer.Option(help="with --git: branch, tag or commit (default HEAD)")] = None,
    path: Annotated[str | None, typer.Option(help="with --git: folder of tasks (default tasks/)")] = None,
    name: Annotated[str | None, typer.Option(help="display name")] = None,
) -> None:
    """Add a benchmark and start its sync; `regatta benchmark show KEY` follows it."""
    if _registry_given(dataset, folder, git):
        if registry:
            raise typer.BadParameter(f"give the registry once: {dataset} or --registry {registry}")
        registry, dataset = dataset, dataset_option or _choose_dataset(dataset or "")
    elif dataset_option:
        if dataset:
            raise typer.BadParameter(f"give the dataset once: {dataset} or --dataset {dataset_option}")
        dataset = dataset_option
    else:
        _path_hint(dataset, folder, git)
        if registry and not dataset and not git:
            dataset = _choose_dataset(registry)
    body: dict[str, Any] = {"name": name, **_source(dataset, registry, folder, git, ref, path)}
    created = Client().post("/benchmarks", json=body)
    shown = body.get("dataset") or body.get("path") or body.get("repo")
    typer.echo(f"Benchmark added: {created['id']} ({shown}, syncing)")


@benchmark.command("search")
def benchmark_search(
    query: Annotated[str, typer.Argument(help="words to find in a dataset's name or description")] = "",
    limit: Annotated[int, typer.Option(min=1, max=200)] = 50,
    as_json: JsonOpt = False,
) -> None:
    """The datasets of the server's default registry, to add with `regatta benchmark add NAME@VERSION`."""
    data = Client().get("/registry/datasets", q=query, limit=limit)
    if as_json:
        return print_json(data)
    if data["registry"] is None:
        typer.echo("No default registry is configured on the server (REGATTA_DEFAULT_REGISTRY).")
        return None
    table = folding_table("Dataset", "Tasks", "Description", title=f"{data['total']} in {data['registry']}")
    for d in data["datasets"]:
        table.add_row(d["dataset"], str(d["task_count"]), d["description"])
    console.print(table)
    return None


@benchmark.command("list")
def benchmark_list(as_json: JsonOpt = False) -> None:
    """The workspace's benchmarks with their sync status and task counts."""
    data = Client().get("/benchmarks", limit=200)
    if as_json:
        return print_json(data)
    table = folding_table("Name", "Key", "Status", "Tasks", "Added by")
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
    """A benchmark (id, source or name): its sync, invalid tasks and leaderboard."""
    data = Client().get(f"/benchmarks/{key}")
    if as_json:
        return print_json(data)
    b = data["benchmark"]
    console.print(
        f"[bold]{b['name']}[/bold] ({b['source_ref']}) — {b['sync_status']}, {b['task_count']} tasks"
    )
    if b.get("sync_error"):
        console.print(f"[red]{b['sync_error']}[/red]")
    invalid = [task for task in b.get("tasks") or [] if task.get("invalid_reason")]
    if invalid:
        table = folding_table("Invalid task (never scheduled)", "Reason")
        for task in invalid:
            # Text, not markup: a reason quotes "[environment].memory_mb" and the task's own names.
            table.add_row(Text(task["name"]), Text(task["invalid_reason"]))
        console.print(table)
    _leaderboard_table(data["leaderboard"])


def _leaderboard_table(rows: list[dict[str, Any]]) -> None:
    # One ranking of every row; each names its task set and version (only rows of one are ever tied).
    table = folding_table(
        "#", "Agent", "Tasks", "Version", "Pass@1 (95% CI)", "Pass@k", "Cost/task", "Time/task"
    )
    for r in rows:
        p1 = r.get("pass_at_1") or {}
        section = r.get("section") or {}
        task_set = section.get("task_set") or r.get("task_set") or "full"
        table.add_row(
            # Rows of older scoring rules are not ranked: the reason stands in for the rank.
            section.get("unranked_reason") or rank(r),
            agent_label(r["harness"], r["model"]),
            "full list" if task_set == "full" else f"set {task_set}",
            str(section.get("version") or r.get("version") or "–"),
            pct(p1),
            pass_at_k(r.get("pass_at_k")),
            money(r.get("cost_per_task")),
            secs(r.get("mean_duration_seconds")),
        )
    console.print(table)


@benchmark.command("sync")
def benchmark_sync(key: str) -> None:
    """Sync a benchmark's tasks from its source again (or retry a failed sync)."""
    Client().post(f"/benchmarks/{key}/sync")
    console.print("Sync requested")


@benchmark.command("remove")
def benchmark_remove(key: str, yes: YesOpt = False) -> None:
    """Remove a benchmark you added (workspace admins: any user-added one)."""
    client = Client()
    found = client.get(f"/benchmarks/{quote(key, safe='')}")["benchmark"]  # unknown: refused before asking
    if not confirm_or_refuse(f"Remove benchmark {found['name']} ({found['source_ref']})?", yes):
        console.print("Not removed")
        raise typer.Exit(1)
    client.request("DELETE", f"/benchmarks/{quote(found['id'], safe='')}")
    console.print("Benchmark removed")
