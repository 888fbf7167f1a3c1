"""`regatta run …`: submit (and follow), list, show, attempts, label, unlabel, compare, logs, stop,
rerun-errored, download."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

import httpx
import typer
from regatta_shared.attempt_labels import normal_label
from regatta_shared.participants import agent_label
from regatta_shared.runs.status import RUN_STATUSES, TERMINAL
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from .cli_common import (
    JsonOpt,
    YesOpt,
    confirm_or_refuse,
    console,
    folding_table,
    pass_at_k,
    pct,
    print_json,
    rank,
)
from .client import Client, Failure

run = typer.Typer(no_args_is_help=True)


@run.command("submit")
def run_submit(
    file: Path,
    wait: Annotated[bool, typer.Option("--wait", help="Follow progress until the run ends")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Submit a run from an Osmosis-style TOML config."""
    try:
        content = file.read_bytes()
    except OSError as error:
        raise typer.BadParameter(f"cannot read {file}: {error.strerror}", param_hint="FILE") from None
    client = Client()
    created = client.post("/runs", content=content, headers={"Content-Type": "application/toml"})
    # On stderr: `--json` output stays one parseable document, and a warning is seen either way.
    for warning in created.get("warnings") or []:
        typer.echo(f"Warning: {warning}", err=True)
    if not wait:
        return print_json(created) if as_json else console.print(f"Run submitted: {created['name']}")
    console.print(f"Run submitted: [bold]{created['name']}[/bold]")
    detail = follow(client, created["id"])
    if as_json:
        return print_json(detail)
    _results_table(detail)
    if detail["benchmark_run"]["status"] != "finished":
        raise typer.Exit(1)


def follow(client: Client, run_id: str, quiet: bool = False) -> dict[str, Any]:
    """Poll the run until it ends (a progress bar unless `quiet`); its detail at the end."""
    if quiet:
        while (detail := client.get(f"/runs/{run_id}"))["benchmark_run"]["status"] not in TERMINAL:
            time.sleep(0.5)
        return detail
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
            if status in TERMINAL:
                return detail
            time.sleep(0.5)


def _results_table(detail: dict[str, Any]) -> None:
    run_info = detail["benchmark_run"]
    console.print(f"Run [bold]{run_info['name']}[/bold]: {run_info['status']}")
    if run_info.get("status_reason"):
        console.print(f"Reason: {escape(run_info['status_reason'])}")
    agents = {a["id"]: a for a in detail["agents"]}
    table = folding_table(
        "#",
        "Agent",
        "Pass@1 (95% CI)",
        "Pass@k",
        "Passed",
        "Failed",
        "Errored",
        "Cancelled",
        # statistics.md §1: a sandbox the agent broke is its failure; errored is never the agent's doing.
        caption="Failed includes attempts whose sandbox the agent left unfit for a verdict. "
        "Errored: not scored, a fault outside the sandbox (engine, network, provider, platform).",
    )
    for m in sorted(detail["agent_metrics"], key=lambda m: (m.get("rank") or 99, m["agent_index"])):
        agent = agents[m["benchmark_run_agent_id"]]
        table.add_row(
            rank(m),
            agent_label(agent["harness"], agent["model"]),
            pct(m.get("pass_at_1")),
            pass_at_k(m.get("pass_at_k")),
            str(m["passed"]),
            str(m["failed"]),
            str(m["errored"]),
            str(m["cancelled"]),
        )
    console.print(table)


@run.command("list")
def run_list(
    benchmark: Annotated[
        str | None, typer.Option(help="Only this benchmark's runs (id, source or name)")
    ] = None,
    status: Annotated[
        str | None, typer.Option(help=f"Only runs in this status: {', '.join(RUN_STATUSES)}")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=200, help="At most this many runs")] = 50,
    as_json: JsonOpt = False,
) -> None:
    """The workspace's runs, newest first."""
    if status is not None and status not in RUN_STATUSES:
        raise typer.BadParameter(f"must be one of {', '.join(RUN_STATUSES)}", param_hint="--status")
    client = Client()
    # The API filters by benchmark id: a name or source is looked up first (404 names it if unknown).
    benchmark_id = (
        client.get(f"/benchmarks/{quote(benchmark, safe='')}")["benchmark"]["id"] if benchmark else None
    )
    data = client.get("/runs", limit=limit, benchmark=benchmark_id, status=status)
    if as_json:
        return print_json(data)
    table = folding_table("Name", "Status", "Progress", "Benchmark", "Best Pass@1", "Submitted")
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
    if data.get("has_more"):
        console.print(
            f"{len(data['benchmark_runs'])} of {data['total_count']} runs shown (--limit up to 200)"
        )


@run.command("show")
def run_show(key: str, as_json: JsonOpt = False) -> None:
    """A run (id or name): its status and each agent's results."""
    detail = Client().get(f"/runs/{key}")
    if as_json:
        return print_json(detail)
    _results_table(detail)


def _attempt_path(key: str, attempt_id: str) -> str:
    return f"/runs/{quote(key, safe='')}/attempts/{quote(attempt_id, safe='')}"


def all_attempts(client: Client, key: str, **filters: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    offset: int | None = 0
    while offset is not None:
        page = client.get(f"/runs/{quote(key, safe='')}/attempts", limit=1000, offset=offset, **filters)
        found += page["attempts"]
        offset = page.get("next_offset")
    return found


def _labels_cell(labels: list[dict[str, Any]]) -> str:
    # Labels and notes are typed by people: never rich markup.
    return "\n".join(
        escape(f"{item['label']}: {item['note']}" if item.get("note") else item["label"]) for item in labels
    )


@run.command("attempts")
def run_attempts(
    key: str,
    label: Annotated[str | None, typer.Option(help="Only the attempts with this label")] = None,
    task: Annotated[str | None, typer.Option(help="Only this task's attempts")] = None,
    as_json: JsonOpt = False,
) -> None:
    """A run's attempts with their outcome, reward and labels (notes after a colon)."""
    attempts = all_attempts(Client(), key, label=label, task=task)
    if as_json:
        return print_json({"attempts": attempts})
    table = folding_table("Attempt", "Task", "Agent", "#", "Outcome", "Reward", "Labels")
    for a in attempts:
        reward = (a.get("result") or {}).get("primary_reward")
        table.add_row(
            a["attempt_id"],
            escape(a["task"]),
            str(a["agent_index"] + 1),  # counted from 1, as in logs, results.csv and artifact folders
            str(a["attempt_index"] + 1),
            a.get("outcome") or a.get("status") or "scheduled",
            "–" if reward is None else f"{reward:g}",
            _labels_cell(a.get("labels") or []),
        )
    console.print(table)
    return None


@run.command("label")
def run_label(
    key: Annotated[str, typer.Argument(help="Run id or name")],
    attempt: Annotated[str, typer.Argument(help="Attempt id (`regatta run attempts RUN`)")],
    label: Annotated[str, typer.Argument(help='e.g. "reward hacking", "flaky task", "infra"')],
    note: Annotated[str | None, typer.Option(help="Why (up to 2,000 characters)")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Put a label on an attempt, with an optional note; it is an event in the run's and audit logs."""
    body: dict[str, Any] = {"label": label}
    if note is not None:
        body["note"] = note
    made = Client().post(f"{_attempt_path(key, attempt)}/labels", json=body)
    if as_json:
        return print_json(made)
    console.print(f"Labelled {escape(attempt)}: {escape(made['label'])} ({made['id']})")
    return None


@run.command("unlabel")
def run_unlabel(
    key: Annotated[str, typer.Argument(help="Run id or name")],
    attempt: Annotated[str, typer.Argument(help="Attempt id")],
    label: Annotated[str, typer.Argument(help="The label (any case or spacing) or its id")],
) -> None:
    """Take a label off an attempt."""
    client = Client()
    found = next((a for a in all_attempts(client, key) if a["attempt_id"] == attempt), None)
    if found is None:
        raise Failure(f"run {key} has no attempt {attempt}", code="NOT_FOUND", field="ATTEMPT")
    wanted = normal_label(label)
    match = next((x for x in found.get("labels") or [] if wanted in (x["label"], x["id"].lower())), None)
    if match is None:
        raise Failure(f"attempt {attempt} has no label {label!r}", code="NOT_FOUND", field="LABEL")
    client.request("DELETE", f"{_attempt_path(key, attempt)}/labels/{quote(match['id'], safe='')}")
    console.print(f"Removed {escape(match['label'])} from {escape(attempt)}")


def _participant(value: str, hint: str) -> str:
    """`RUN[:AGENT]` as the API's `RUN:AGENT_INDEX`. What users see counts agents from 1 (tables, logs,
    results.csv, artifact folders), so AGENT does too (default 1); the API's `agent_index` is 0-based."""
    run_key, _, agent = value.rpartition(":")
    if not (run_key and agent.isdigit()):
        return f"{value}:0"
    if int(agent) < 1:
        raise typer.BadParameter(f"agent numbers start at 1 (got {value})", param_hint=hint)
    return f"{run_key}:{int(agent) - 1}"


def _rate(passed: int, scored: int, rate: float | None) -> str:
    return "–" if rate is None else f"{rate:.0%} ({passed}/{scored})"


@run.command("compare")
def run_compare(
    a: Annotated[str, typer.Argument(help="RUN[:AGENT] (agent number from 1, default 1)")],
    b: Annotated[str, typer.Argument(help="RUN[:AGENT], compared against A")],
    as_json: JsonOpt = False,
) -> None:
    """B against A task by task, and the overall pass@1 difference with the paired test."""
    data = Client().get("/compare", a=_participant(a, "A"), b=_participant(b, "B"))
    if as_json:
        return print_json(data)
    table = folding_table("Task", "Category", "A", "B", "Difference", "Change")
    for row in data["tasks"]:
        table.add_row(
            escape(row["task"]),  # task names come from the benchmark: never rich markup
            escape(row["category"] or "–"),
            _rate(row["a_passed"], row["a_scored"], row["a_rate"]),
            _rate(row["b_passed"], row["b_scored"], row["b_rate"]),
            "–" if row["difference"] is None else f"{row['difference'] * 100:+.1f} pp",
            row["verdict"],
        )
    console.print(table)
    s = data["summary"]
    for side in ("a", "b"):
        who = data[side]
        name, agent = escape(who["run_name"]), escape(agent_label(who["harness"], who["model"]))
        console.print(f"{side.upper()}: {name} agent {who['agent_index'] + 1} ({agent})")
    if s["difference"] is None:
        console.print("No task was scored for both participants.")
        return None
    console.print(
        f"Pass@1 A {pct(s['a_pass_at_1'])}  B {pct(s['b_pass_at_1'])}  "
        f"difference {s['difference'] * 100:+.1f} pp  "
        f"p = {s['p_value']:.4g} (paired sign-flip, {s['tasks_compared']} tasks)"
    )
    console.print(f"{s['improved']} improved, {s['regressed']} regressed, {s['same']} same")
    return None


@run.command("logs")
def run_logs(key: str, limit: int = 50, as_json: JsonOpt = False) -> None:
    """A run's lifecycle log, oldest first."""
    data = Client().get(f"/runs/{key}/logs", limit=limit)
    if as_json:
        return print_json(data)
    for entry in data["logs"]:
        console.print(f"{entry['timestamp']} {entry['level']:<7} {entry['step']:<9} {entry['message']}")


@run.command("stop")
def run_stop(key: str, yes: YesOpt = False) -> None:
    """Stop a pending, queued or running run (its unfinished attempts are cancelled)."""
    client = Client()
    run_info = client.get(f"/runs/{quote(key, safe='')}")  # a run that does not exist is never asked about
    found, done = run_info["benchmark_run"], run_info["progress"]
    state = f"{found['status']}, {done['ingested']}/{done['expected']} results"
    if not confirm_or_refuse(f"Stop run {found['name']} ({state})?", yes):
        console.print("Not stopped")
        raise typer.Exit(1)
    client.post(f"/runs/{quote(found['id'], safe='')}/stop")
    console.print("Stop requested")


@run.command("rerun-errored")
def run_rerun_errored(key: str) -> None:
    """Run a finished run's errored attempts again, under its unchanged conditions."""
    accepted = Client().post(f"/runs/{key}/rerun-errored")
    count = accepted["attempts"]
    console.print(f"Re-running {count} errored attempt{'s' if count != 1 else ''} of {accepted['id']}")


@run.command("download")
def run_download(
    key: str,
    output: Annotated[Path, typer.Option("-o", "--output", help="folder to write into")] = Path("."),
    types: Annotated[str, typer.Option(help="summary,results,logs,artifacts or all")] = "summary,results",
    as_json: JsonOpt = False,
) -> None:
    """Download summary.csv, results.csv, logs.txt and artifacts of a run (a running run: a snapshot)."""
    wanted = "summary,results,artifacts,logs" if types == "all" else types
    manifest = Client().get(f"/runs/{key}/downloads", types=wanted)
    written = []
    root = output.expanduser().resolve()
    for item in manifest["files"]:
        target = (root / item["path"]).resolve()
        if root not in target.parents:
            raise Failure(f"Refusing {item['path']}: outside {root}", code="UNSAFE_PATH", field="path")
        target.parent.mkdir(parents=True, exist_ok=True)
        response = httpx.get(item["url"], timeout=120)
        if response.status_code != 200 or len(response.content) != item["size"]:
            failed = f"Failed {item['path']}: HTTP {response.status_code}"
            raise Failure(failed, code="DOWNLOAD_FAILED", status=response.status_code)
        target.write_bytes(response.content)
        written.append({"path": item["path"], "size": item["size"]})
    if as_json:
        return print_json({"files": written, "root": str(root)})
    console.print(f"Downloaded {len(written)} files to {root}")
