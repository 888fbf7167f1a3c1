"""`regatta task show` (issue 38, task browser), the real CLI in a subprocess against the gateway served on
a socket: the instruction and the file list, one file with --file, JSON with --json; what the task wrote is
printed as plain text (rich markup stays literal, a terminal escape is shown, not sent); hidden solutions
stay hidden from a member; an unknown task or file is a failure naming it."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from regatta_shared.events import BenchmarkMetadata

from tests.support.task_archives import SOLUTION, task_files

from .cli_support import regatta, served
from .conftest import Gateway
from .test_task_browser_api import seed

HOSTILE = "# Title\n\n[bold red]not markup[/bold red] \x1b[2J\x1b]0;owned\x07 done\n"


@pytest.fixture
def url(gateway: Gateway) -> Iterator[str]:
    with served(gateway) as address:
        yield address


def test_task_show_prints_the_instruction_and_files_as_plain_text(gateway: Gateway, url: str) -> None:
    gw = gateway
    seed(
        gw,
        "shown",
        BenchmarkMetadata(show_solutions=False),
        {**task_files(), "instruction.md": HOSTILE.encode()},
    )

    shown = regatta(url, "task", "show", "shown", "parser-fix")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    out = shown.stdout
    assert "Task parser-fix of shown (version 1.0)" in out
    assert "validity: valid" in out and "difficulty: hard" in out
    assert "resources: 2 CPU, 3072 MB memory, 4096 MB disk" in out
    assert "[bold red]not markup[/bold red]" in out
    assert "\x1b" not in out and "\x07" not in out and "\\x1b[2J" in out
    assert "  environment/data.bin  1024 bytes  (binary)" in out
    assert "environment/big.txt" in out and "(truncated)" in out
    # An admin (the default token) sees the solution listed, and its text with --file.
    assert "solution/solve.sh" in out
    solution = regatta(url, "task", "show", "shown", "parser-fix", "--file", "solution/solve.sh")
    assert solution.returncode == 0 and solution.stdout == SOLUTION

    member = gw.member("default", "cli-reader@example.com")
    hidden = regatta(url, "task", "show", "shown", "parser-fix", token=member)
    assert hidden.returncode == 0 and "solution/solve.sh" not in hidden.stdout
    assert "this benchmark hides its solutions" in hidden.stdout
    refused = regatta(url, "task", "show", "shown", "parser-fix", "--file", "solution/solve.sh", token=member)
    assert refused.returncode != 0 and SOLUTION not in refused.stdout
    assert "no file 'solution/solve.sh'" in refused.stdout + refused.stderr

    as_json = regatta(url, "task", "show", "shown", "parser-fix", "--json", token=member)
    body = json.loads(as_json.stdout)
    assert body["instruction"] == HOSTILE and body["solutions_hidden"] is True
    one = json.loads(
        regatta(url, "task", "show", "shown", "parser-fix", "--file", "task.toml", "--json").stdout
    )
    assert one["path"] == "task.toml" and 'category = "parsing"' in one["content"]

    big = regatta(url, "task", "show", "shown", "parser-fix", "--file", "environment/big.txt")
    assert big.returncode == 0 and big.stdout.startswith("line 000000\n") and "truncated" in big.stderr
    binary = regatta(url, "task", "show", "shown", "parser-fix", "--file", "environment/data.bin")
    assert binary.returncode != 0 and "binary, 1024 bytes" in binary.stdout + binary.stderr

    unknown = regatta(url, "task", "show", "shown", "no-such-task")
    assert unknown.returncode != 0 and "no-such-task" in unknown.stdout + unknown.stderr
