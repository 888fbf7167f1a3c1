"""`regatta`: run the embedded stack, a single service, maintenance, and talk to a gateway."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from .cli_account import secret, token
from .cli_admin import admin
from .cli_benchmark import benchmark
from .cli_common import console, show_failure, usage_failure, wants_json
from .cli_run import run
from .cli_task import task
from .cli_task_show import task_show as _task_show  # noqa: F401 - registers `task show`
from .cli_workspace import workspace
from .client import DEFAULT_URL, Failure, forget_stack, register_stack, select_workspace
from .services import NAMES as SERVICE_NAMES

app = typer.Typer(
    no_args_is_help=True, add_completion=False, help="Run agent benchmarks: the embedded stack and its API"
)
projections = typer.Typer(no_args_is_help=True)
app.add_typer(benchmark, name="benchmark", help="Add, list, sync and remove benchmarks")
app.add_typer(run, name="run", help="Submit, follow and stop benchmark runs")
app.add_typer(
    task, name="task", help="Show a benchmark's task; try a task folder of your own as a scratch benchmark"
)
app.add_typer(projections, name="projections", help="Maintain read models")
app.add_typer(secret, name="secret", help="Secret records (values are never shown)")
app.add_typer(token, name="token", help="API tokens")
app.add_typer(workspace, name="workspace", help="Workspaces and their members")
app.add_typer(admin, name="admin", help="Platform administration (platform administrators only)")


@app.callback()
def _root(
    workspace_name: Annotated[
        str | None,
        typer.Option(
            "--workspace",
            envvar="REGATTA_WORKSPACE",
            help="Workspace (name or id) to act in; default: your first by name",
        ),
    ] = None,
) -> None:
    select_workspace(workspace_name)


@app.command()
def up(
    port: Annotated[int, typer.Option(help="Gateway port")] = 8000,
    executors: Annotated[int, typer.Option(help="Executor processes")] = 2,
    data_dir: Annotated[Path, typer.Option(help="Data folder")] = Path(".regatta"),
) -> None:
    """Start NATS, the SQLite store and every service on this machine (embedded default)."""
    from .ownership import DataDirInUse
    from .stack import Stack

    stack = Stack(
        data_dir=Path(os.environ.get("REGATTA_DATA_DIR", data_dir)),
        port=port,
        executors=executors,
        nats_url=os.environ.get("NATS_URL"),
        database_url=os.environ.get("DATABASE_URL"),
    )
    stack.say = lambda message: console.print(f"[dim]{message}[/dim]")
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        # Before anything that would touch a running stack's state (its registration below).
        stack.take_data_dir()
    except DataDirInUse as refused:
        console.print(f"[red]Error:[/red] {escape(str(refused))}")
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    try:
        stack.start()
        register_stack(stack.url, stack.data_dir / "token")
        console.print(f"Regatta is up at [bold]{stack.url}[/bold] (token in {stack.data_dir / 'token'})")
        chosen = f"[bold]{stack.environment}[/bold] environment ({stack.environment_reason})"
        console.print(f"Executors run tasks in the {chosen}")
        console.print(f"Try: {try_command(stack.url)}")
        stack.supervise()
    except KeyboardInterrupt:
        grace = stack.executor_grace()
        console.print(
            f"Stopping: running attempts get up to {grace:g} s to finish; the others run again at the "
            "next start (Ctrl-C again to stop them now)"
        )
    finally:
        stack.stop()
        forget_stack(stack.url)


def try_command(url: str) -> str:
    """The first command to try, working as printed: the URL is named unless it is the CLI's default."""
    prefix = "" if url == DEFAULT_URL else f"REGATTA_URL={url} "
    return f"{prefix}regatta run submit examples/runs/demo.toml --wait"


@app.command(help=f"Run one service in the foreground ({', '.join(SERVICE_NAMES)}).")
def service(name: str) -> None:
    from .services import run_service

    run_service(name)


@projections.command("rebuild")
def rebuild() -> None:
    """Drop the read models and replay the whole event log into them."""
    from .services import REBUILD_MODULE

    # The read models are the gateway's: the CLI launches its rebuild, it imports no service
    # (tests/unit/test_import_rules.py).
    os.execv(sys.executable, [sys.executable, "-m", REBUILD_MODULE])


def main() -> None:
    # Every command fails the same way: the server's message (field by field), exit 1. With --json, click
    # must hand its own refusals (bad values, unknown options) back rather than print them: they become
    # the same JSON error, exit 2.
    as_json = wants_json(sys.argv[1:])
    try:
        code = app(standalone_mode=not as_json)
    except Failure as error:
        show_failure(error, as_json)
        raise SystemExit(1) from None
    except typer.TyperException as error:
        if type(error).__name__ == "NoArgsIsHelpError":
            error.show()  # a group named alone: its help, as without --json
        else:
            show_failure(usage_failure(error), as_json)
        raise SystemExit(getattr(error, "exit_code", 1)) from None
    except typer.Abort:
        show_failure(Failure("Aborted", code="ABORTED"), as_json)
        raise SystemExit(1) from None
    raise SystemExit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
