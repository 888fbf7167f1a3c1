"""Issue 38 (quick iteration): `regatta task try ./my-task` against a real stack, as a workspace member.
A task made by Harbor's own `harbor init`, uploaded as a scratch benchmark, run with the oracle (its
solution passes) and with `nop` (it does nothing: the task fails) in the `local` environment; the
outcome and reward the CLI reports are the attempts' own, the run never ranks; a folder with a link
out of it is refused before anything reaches the server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

from tests.e2e.test_cli import regatta
from tests.e2e.web_ui_support import ACK_WAIT

HARBOR = Path(sys.executable).with_name("harbor")


def harbor_task(parent: Path) -> Path:
    """`harbor init` a task, then fill it in as its author would: a solution and a test of it."""
    made = subprocess.run(
        [
            str(HARBOR),
            "init",
            "acme/my-task",
            "--task",
            "--no-pytest",
            "--verifier-mode",
            "shared",
            "-o",
            str(parent),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    task = parent / "my-task"
    (task / "instruction.md").write_text("Write the answer, 42, to /app/answer.txt.\n")
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\necho 42 > /app/answer.txt\n")
    (task / "tests" / "test.sh").write_text(
        '#!/bin/bash\nif [ "$(cat /app/answer.txt 2>/dev/null)" = 42 ]; then echo 1; else echo 0; fi'
        " > /logs/verifier/reward.txt\n"
    )
    return task


def test_task_try_uploads_a_harbor_task_runs_it_and_reports_each_outcome(
    shared_stack, api_for, tmp_path: Path
) -> None:
    stack = shared_stack(executors=1, **ACK_WAIT)
    api = api_for(stack)
    member = api.http.post(
        f"/api/v1/workspaces/{quote(stack.workspace, safe='')}/members",
        json={"email": "tries@example.com", "role": "member", "issue_token": True},
    )
    assert member.status_code == 201, member.text
    token = member.json()["token"]
    task = harbor_task(tmp_path)

    tried = regatta(stack, "task", "try", str(task), "--wait", "--json", token=token)
    assert tried.returncode == 0, tried.stdout + tried.stderr
    shown = json.loads(tried.stdout)
    assert shown["status"] == "finished", shown
    assert [(t["task"], t["outcome"], t["reward"]) for t in shown["tasks"]] == [
        ("acme/my-task", "passed", 1.0)
    ]
    assert shown["benchmark"]["name"] == "my-task" and shown["benchmark"]["invalid"] == []
    assert shown["url"] == f"{stack.url}/benchmarks/runs/{quote(shown['run']['name'], safe='')}"
    detail = api.get(f"/runs/{shown['run']['id']}")
    assert detail["leaderboard_qualification"]["qualifies"] is False
    assert any("scratch" in r for r in detail["leaderboard_qualification"]["reasons"])
    benchmark_id = shown["benchmark"]["id"]
    assert api.get(f"/benchmarks/{benchmark_id}")["benchmark"]["source_type"] == "upload"

    # The same folder with an agent that does nothing: its scratch benchmark again, the task failed.
    plain = regatta(stack, "task", "try", str(task), "--harness", "nop", "--wait", token=token)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert "the same files as before" in plain.stdout and benchmark_id in plain.stdout, plain.stdout
    [row] = [line for line in plain.stdout.splitlines() if "acme/my-task" in line]
    assert "failed" in row.split() and "0" in row.split(), plain.stdout
    assert "/benchmarks/runs/" in plain.stdout
    board = api.get(f"/benchmarks/{benchmark_id}/leaderboard")
    assert board["leaderboard"] == [], board

    # A link out of the folder: refused by the CLI, naming it; nothing reaches the server.
    before = api.get("/benchmarks")["benchmarks"]
    (task / "tests" / "hostname").symlink_to("/etc/hostname")
    refused = regatta(stack, "task", "try", str(task), "--json", token=token)
    assert refused.returncode == 2 and refused.stdout == "", refused.stdout
    error = json.loads(refused.stderr)["error"]
    assert "tests/hostname links outside the folder" in error["message"], error
    assert api.get("/benchmarks")["benchmarks"] == before
    (task / "tests" / "hostname").unlink()

    # A task.toml Harbor refuses: the server's refusal names the file and field; nothing is added.
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace("timeout_sec = 600.0\n", 'timeout_sec = "soon"\n', 1))
    bad = regatta(stack, "task", "try", str(task), token=token)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "my-task/task.toml: verifier.timeout_sec" in bad.stdout, bad.stdout
    assert api.get("/benchmarks")["benchmarks"] == before

    # A task Harbor's TaskConfig accepts but that cannot run (no instruction.md): stored, its sync
    # fails naming the reason, and the command fails with it before submitting anything.
    harbor_task(tmp_path / "second")
    (tmp_path / "second" / "my-task" / "instruction.md").unlink()
    runs_before = api.get("/runs")["total_count"]
    failed = regatta(stack, "task", "try", str(tmp_path / "second" / "my-task"), "--json", token=token)
    assert failed.returncode == 1 and failed.stdout == "", failed.stdout
    error = json.loads(failed.stderr)["error"]
    assert error["code"] == "SYNC_FAILED" and "instruction.md is missing" in error["message"], error
    assert api.get("/runs")["total_count"] == runs_before
