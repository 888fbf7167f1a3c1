"""`regatta`: run the embedded stack, a single service, maintenance, and talk to a gateway."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .client import ApiFailure, Client, select_workspace

app = typer.Typer(no_args_is_help=True, add_completion=False)
benchmark = typer.Typer(no_args_is_help=True)
run = typer.Typer(no_args_is_help=True)
projections = typer.Typer(no_args_is_help=True)
app.add_typer(benchmark, name="benchmark", help="Add, list, sync and remove benchmarks")
app.add_typer(run, name="run", help="Submit, follow and stop benchmark runs")
app.add_typer(projections, name="projections", help="Maintain read models")
console = Console()
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON")]


@app.callback()
def _root(
    workspace: Annotated[
        str | None,
        typer.Option(
            "--workspace",
            envvar="REGATTA_WORKSPACE",
            help="Workspace (name or id) to act in; default: your first by name",
        ),
    ] = None,
) -> None:
    select_workspace(workspace)


def _print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2))


@app.command()
def up(
    port: Annotated[int, typer.Option(help="Gateway port")] = 8000,
    executors: Annotated[int, typer.Option(help="Executor processes")] = 2,
    data_dir: Annotated[Path, typer.Option(help="Data folder")] = Path(".regatta"),
) -> None:
    """Start NATS, the SQLite store and every service on this machine (embedded default)."""
    from .stack import Stack

    stack = Stack(
        data_dir=Path(os.environ.get("REGATTA_DATA_DIR", data_dir)),
        port=port,
        executors=executors,
        nats_url=os.environ.get("NATS_URL"),
        database_url=os.environ.get("DATABASE_URL"),
    )
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        stack.start()
        console.print(f"Regatta is up at [bold]{stack.url}[/bold] (token in {stack.data_dir / 'token'})")
        console.print("Try: regatta run submit examples/runs/demo.toml --wait")
        stack.supervise()
    except KeyboardInterrupt:
        pass
    finally:
        stack.stop()


@app.command()
def service(name: str) -> None:
    """Run one service in the foreground (relay, registry-sync, run-scheduler, executor, scoring, gateway)."""
    from .services import run_service

    run_service(name)


@projections.command("rebuild")
def rebuild() -> None:
    """Drop the read models and replay the whole event log into them."""
    from regatta_gateway.opsmodels import OpsReadModels
    from regatta_gateway.readmodels import ReadModels
    from regatta_shared.projections import ProjectionRunner
    from regatta_shared.service import make_store
    from regatta_shared.settings import load_settings

    store = make_store(load_settings())
    for projection in (ReadModels(), OpsReadModels()):
        count = ProjectionRunner(store, projection).rebuild()
        console.print(f"Rebuilt read models {projection.name!r} from {count} events")


def _client() -> Client:
    return Client()


def _fail(error: ApiFailure) -> None:
    console.print(f"[red]Error:[/red] {error}")
    raise typer.Exit(1)


@benchmark.command("add")
def benchmark_add(
    dataset: Annotated[str, typer.Argument(help="dataset name[@version], or a folder with --folder")],
    registry: Annotated[str | None, typer.Option(help="registry.json path")] = None,
    folder: Annotated[bool, typer.Option(help="DATASET is a local folder of tasks")] = False,
    name: Annotated[str | None, typer.Option()] = None,
) -> None:
    body: dict[str, Any] = {"name": name}
    if folder:
        body.update(source_type="folder", path=str(Path(dataset).resolve()))
    else:
        body.update(
            source_type="registry", registry_path=str(Path(registry or ".").resolve()), dataset=dataset
        )
    try:
        created = _client().post("/benchmarks", json=body)
    except ApiFailure as error:
        _fail(error)
    console.print(f"Benchmark added: {created['id']} (syncing)")


@benchmark.command("list")
def benchmark_list(as_json: JsonOpt = False) -> None:
    try:
        data = _client().get("/benchmarks", limit=200)
    except ApiFailure as error:
        _fail(error)
    if as_json:
        return _print_json(data)
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
    try:
        data = _client().get(f"/benchmarks/{key}")
    except ApiFailure as error:
        _fail(error)
    if as_json:
        return _print_json(data)
    b = data["benchmark"]
    console.print(
        f"[bold]{b['name']}[/bold] ({b['source_ref']}) — {b['sync_status']}, {b['task_count']} tasks"
    )
    if b.get("sync_error"):
        console.print(f"[red]{b['sync_error']}[/red]")
    _leaderboard_table(data["leaderboard"])


def _leaderboard_table(rows: list[dict[str, Any]]) -> None:
    table = Table("#", "Agent", "Pass@1 (95% CI)", "Pass@k", "Cost/task", "Time/task")
    for r in rows:
        p1 = r.get("pass_at_1") or {}
        pk = (r.get("pass_at_k") or [{}])[-1]
        rank = f"{r.get('rank')}{'*' if r.get('tied') else ''}"
        table.add_row(
            rank,
            f"{r['model']} ({r['harness']})",
            _pct(p1),
            f"{pk.get('value', 0):.0%}",
            _money(r.get("cost_per_task")),
            _secs(r.get("mean_duration_seconds")),
        )
    console.print(table)


def _pct(metric: dict[str, Any] | None) -> str:
    if not metric:
        return "–"
    return f"{metric['value']:.1%} ({metric['ci_low']:.1%}–{metric['ci_high']:.1%})"


def _money(value: float | None) -> str:
    return "–" if value is None else f"${value:.4f}"


def _secs(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}s"


@benchmark.command("sync")
def benchmark_sync(key: str) -> None:
    try:
        _client().post(f"/benchmarks/{key}/sync")
    except ApiFailure as error:
        _fail(error)
    console.print("Sync requested")


@benchmark.command("remove")
def benchmark_remove(key: str) -> None:
    try:
        _client().request("DELETE", f"/benchmarks/{key}")
    except ApiFailure as error:
        _fail(error)
    console.print("Benchmark removed")


@run.command("submit")
def run_submit(
    file: Path,
    wait: Annotated[bool, typer.Option("--wait", help="Follow progress until the run ends")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Submit a run from an Osmosis-style TOML config."""
    client = _client()
    try:
        created = client.post(
            "/runs", content=file.read_bytes(), headers={"Content-Type": "application/toml"}
        )
    except ApiFailure as error:
        _fail(error)
    if not wait:
        return _print_json(created) if as_json else console.print(f"Run submitted: {created['name']}")
    console.print(f"Run submitted: [bold]{created['name']}[/bold]")
    detail = _follow(client, created["id"])
    if as_json:
        return _print_json(detail)
    _results_table(detail)
    if detail["benchmark_run"]["status"] != "finished":
        raise typer.Exit(1)


def _follow(client: Client, run_id: str) -> dict[str, Any]:
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
    ) as progress:
        bar = progress.add_task("pending", total=None)
        while True:
            detail = client.get(f"/runs/{run_id}")
            status = detail["benchmark_run"]["status"]
            done = detail["progress"]
            progress.update(
                bar, description=status, completed=done["ingested"], total=done["expected"] or None
            )
            if status in ("finished", "failed", "stopped"):
                return detail
            time.sleep(0.5)


def _results_table(detail: dict[str, Any]) -> None:
    run_info = detail["benchmark_run"]
    console.print(f"Run [bold]{run_info['name']}[/bold]: {run_info['status']}")
    agents = {a["id"]: a for a in detail["agents"]}
    table = Table("#", "Agent", "Pass@1 (95% CI)", "Pass@k", "Passed", "Failed", "Errored", "Cancelled")
    for m in sorted(detail["agent_metrics"], key=lambda m: (m.get("rank") or 99, m["agent_index"])):
        agent = agents[m["benchmark_run_agent_id"]]
        pk = (m.get("pass_at_k") or [{}])[-1]
        table.add_row(
            f"{m.get('rank') or '–'}{'*' if m.get('tied') else ''}",
            f"{agent['harness']} · {agent['model']}",
            _pct(m.get("pass_at_1")),
            f"@{pk.get('k', '–')} {pk.get('value', 0):.0%}",
            str(m["passed"]),
            str(m["failed"]),
            str(m["errored"]),
            str(m["cancelled"]),
        )
    console.print(table)


@run.command("list")
def run_list(as_json: JsonOpt = False) -> None:
    try:
        data = _client().get("/runs", limit=50)
    except ApiFailure as error:
        _fail(error)
    if as_json:
        return _print_json(data)
    table = Table("Name", "Status", "Progress", "Benchmark", "Best Pass@1", "Submitted")
    for r in data["benchmark_runs"]:
        best = r.get("best_pass_at_1")
        table.add_row(
            r["name"],
            r["status"],
            f"{r['ingested_results']}/{r['expected_results']}",
            r["benchmark_name"],
            "–" if best is None else f"{best:.1%}",
            r["created_at"],
        )
    console.print(table)


@run.command("show")
def run_show(key: str, as_json: JsonOpt = False) -> None:
    try:
        detail = _client().get(f"/runs/{key}")
    except ApiFailure as error:
        _fail(error)
    if as_json:
        return _print_json(detail)
    _results_table(detail)


@run.command("logs")
def run_logs(key: str, limit: int = 50, as_json: JsonOpt = False) -> None:
    try:
        data = _client().get(f"/runs/{key}/logs", limit=limit)
    except ApiFailure as error:
        _fail(error)
    if as_json:
        return _print_json(data)
    for entry in data["logs"]:
        console.print(f"{entry['timestamp']} {entry['level']:<7} {entry['step']:<9} {entry['message']}")


@run.command("stop")
def run_stop(key: str) -> None:
    try:
        _client().post(f"/runs/{key}/stop")
    except ApiFailure as error:
        _fail(error)
    console.print("Stop requested")


def main() -> None:
    from . import cli_more, cli_workspace

    cli_more.register(app, run, console)
    cli_workspace.register(app, console)
    app()


if __name__ == "__main__":
    main()
