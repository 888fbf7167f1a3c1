"""`regatta task show BENCHMARK TASK [--file PATH] [--json]`: a benchmark's task as the gateway reads it from
its archive: metadata, validity, the instruction and the file list, or one file's text.

Everything printed comes from whoever wrote the task: it is written out as plain text, never as rich markup,
and control characters (a terminal's escape sequences) are shown as `\\xNN`, not sent to the terminal.
"""

from __future__ import annotations

import re
from typing import Annotated, Any
from urllib.parse import quote

import typer

from .cli_common import JsonOpt, print_json
from .cli_task import task
from .client import Client, Failure

# C0 controls but newline and tab, DEL, and C1 controls (0x9b is a one-byte CSI on some terminals).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def plain(text: str) -> str:
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


@task.command("show")
def task_show(
    benchmark: Annotated[str, typer.Argument(help="The benchmark (id or name)")],
    name: Annotated[str, typer.Argument(help="The task's name")],
    file: Annotated[str | None, typer.Option("--file", help="Print this file of the task (its path)")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Show a benchmark's task: its instruction and files (a file's text with --file)."""
    body = Client().get(f"/benchmarks/{quote(benchmark, safe='')}/tasks/{quote(name, safe='')}")
    if file is not None:
        chosen = _file(body, file)
        if as_json:
            return print_json(chosen)
        typer.echo(plain(chosen["content"]), nl=not chosen["content"].endswith("\n"))
        if chosen["truncated"]:
            typer.echo(f"(truncated: the start of {chosen['size']} bytes)", err=True)
        return None
    if as_json:
        return print_json(body)
    for line in _summary(body):
        typer.echo(plain(line))
    return None


def _file(body: dict[str, Any], path: str) -> dict[str, Any]:
    if body.get("files_error"):
        raise Failure(f"The task's files cannot be shown: {body['files_error']}", code="UNREADABLE")
    found = next((f for f in body["files"] if f["path"] == path), None)
    if found is None:
        hidden = " (this benchmark hides its solutions)" if body.get("solutions_hidden") else ""
        raise Failure(f"The task has no file {path[:300]!r}{hidden}", code="NOT_FOUND", field="--file")
    if found["kind"] == "binary":
        raise Failure(f"{path[:300]!r} is binary, {found['size']} bytes: not shown", field="--file")
    if found["content"] is None:
        raise Failure(f"{path[:300]!r} is past the 4 MiB of a task's files the gateway shows", field="--file")
    return found


def _summary(body: dict[str, Any]) -> list[str]:
    info, resources = body["task"], body["task"]["resources"]
    facts = [
        f"validity: {info['validity']}" + (f" ({info['validity_reason']})" if info["validity_reason"] else "")
    ]
    facts += [f"{key}: {info[key]}" for key in ("category", "difficulty") if info.get(key)]
    asked = [f"{resources[k]:g} {unit}" for k, unit in _UNITS if resources.get(k) is not None]
    if asked:
        facts.append("resources: " + ", ".join(asked))
    lines = [f"Task {info['name']} of {body['benchmark_name']} (version {body['version']})", *facts, ""]
    if body.get("files_error"):
        return [*lines, f"Files cannot be shown: {body['files_error']}"]
    lines += ["Instruction:", body.get("instruction") or "(no instruction.md)", "", "Files:"]
    for f in body["files"]:
        notes = ["binary"] if f["kind"] == "binary" else []
        notes += ["truncated"] if f["truncated"] and f["content"] is not None else []
        notes += ["not shown"] if f["kind"] == "text" and f["content"] is None else []
        lines.append(f"  {f['path']}  {f['size']} bytes" + (f"  ({', '.join(notes)})" if notes else ""))
    if body.get("solutions_hidden"):
        lines.append("  (this benchmark hides its solutions)")
    return lines


_UNITS = (("cpus", "CPU"), ("memory_mb", "MB memory"), ("storage_mb", "MB disk"))
