"""The real `osmosis` CLI (osmosis-ai 0.3.8, a dev dependency) against the running stack over /api/cli."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from regatta_shared.security.sealing import SealError, load_master_key, sealing_key, unseal
from regatta_shared.settings import Settings
from sqlalchemy import create_engine, text

from tests.e2e.conftest import Tenant
from tests.e2e.web_ui_support import ACK_WAIT

from .test_spine import _write_slow_tasks

OSMOSIS = Path(sys.executable).with_name("osmosis")
SECRET_VALUE = "sk-e2e-4b1d7c0a9e3f"
TERMINAL = ("finished", "failed", "stopped")

RUN_TOML = """
[experiment]
benchmark = "regatta-examples@1.0"

[tasks]
task_names = ["hello-file", "rot13"]

[[agents]]
harness = "oracle"
[agents.model]
type = "provider"
model = "openai/gpt-4o-mini"
api_key_secret = "OPENAI_API_KEY"

[[agents]]
harness = "nop"
[agents.model]
type = "hosted"
base_model = "none"
lora_model_name = "none"

[execution]
attempts_per_task = 1
"""

SLOW_TOML = """
[experiment]
benchmark = "slow"

[[agents]]
harness = "oracle"
[agents.model]
type = "hosted"
base_model = "none"
lora_model_name = "none"
"""


class Osmosis:
    """Runs the CLI as a user would: env token bound to the platform URL, `--workspace`, no `.env` above."""

    def __init__(self, stack: Tenant, cwd: Path) -> None:
        self.cwd = cwd
        self.workspace = stack.workspace
        cwd.mkdir(parents=True, exist_ok=True)
        assert not [p for p in (cwd, *cwd.parents) if (p / ".env").exists()], "a .env would change the CLI"
        home = cwd / "home"
        home.mkdir(exist_ok=True)
        self.env = {
            k: v for k, v in os.environ.items() if not k.upper().startswith(("OSMOSIS_", "HTTP", "ALL_PROXY"))
        }
        self.env.update(
            HOME=str(home),
            XDG_CONFIG_HOME=str(home / ".config"),
            OSMOSIS_PLATFORM_URL=stack.url,
            OSMOSIS_TOKEN=stack.token,
            OSMOSIS_TOKEN_PLATFORM_URL=stack.url,
            NO_PROXY="127.0.0.1,localhost",
            COLUMNS="200",
        )
        self.outputs: list[str] = []

    def run(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(OSMOSIS), "--workspace", self.workspace, *args],
            cwd=self.cwd,
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=120,
        )
        self.outputs += [result.stdout, result.stderr]
        return result

    def json(self, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
        result = self.run("--json", *args, env=env)
        assert result.returncode == 0, f"{args}: {result.stdout}\n{result.stderr}"
        return json.loads(result.stdout)

    def error(self, *args: str) -> dict[str, Any]:
        result = self.run("--json", *args)
        assert result.returncode == 1, f"{args}: {result.stdout}\n{result.stderr}"
        return json.loads(result.stderr)["error"]


def wait_status(api: Any, run_id: str, wanted: tuple[str, ...], timeout: float = 180.0) -> None:
    """Polls over HTTP: each CLI start costs a second or more, and the CLI's own view is asserted after."""
    api.wait_for(lambda: api.get(f"/runs/{run_id}")["benchmark_run"]["status"] in wanted, timeout, 0.3)


def manifest_sizes(stack: Tenant, run_id: str) -> dict[str, int]:
    response = httpx.get(
        f"{stack.url}/api/cli/benchmark-runs/{run_id}/outputs/manifest",
        params={"types": "summary,results,artifacts,logs"},
        headers={"Authorization": f"Bearer {stack.token}", "X-Osmosis-Workspace": stack.workspace},
    )
    response.raise_for_status()
    return {item["path"]: item["size"] for item in response.json()["files"]}


def test_osmosis_cli_lists_submits_follows_downloads_and_stops(shared_stack, api_for, tmp_path: Path) -> None:
    stack = shared_stack(executors=1, **ACK_WAIT)
    api = api_for(stack)
    api.benchmark_ready("regatta-examples")
    cli = Osmosis(stack, tmp_path / "work")

    listed = cli.json("benchmark", "list")
    assert [(b["key"], b["task_count"], b["sync_status"]) for b in listed["items"]] == [
        ("regatta-examples@1.0", 10, "ready")
    ]
    info = cli.json("benchmark", "info", "regatta-examples@1.0")["data"]
    assert info["benchmark"]["task_count"] == 10 and info["runs_total_count"] == 0

    saved = cli.json(
        "secret", "set", "OPENAI_API_KEY", "--env", "E2E_KEY_SOURCE", env={"E2E_KEY_SOURCE": SECRET_VALUE}
    )
    assert saved["resource"]["scope"] == "personal"
    secrets = cli.json("secret", "list")
    assert [(s["name"], s["scope"]) for s in secrets["items"]] == [("OPENAI_API_KEY", "personal")]

    (cli.cwd / "run.toml").write_text(RUN_TOML)
    submitted = cli.json("benchmark", "submit", "run.toml", "--yes")["resource"]
    assert submitted["status"] == "pending" and submitted["task_count"] == 2
    name = submitted["name"]
    wait_status(api, submitted["id"], TERMINAL)
    detail = cli.json("benchmark", "runs", "info", name)["data"]
    assert detail["benchmark_run"]["status"] == "finished"
    assert detail["benchmark_run"]["best_pass_at_1"] == 1.0
    assert detail["configuration"]["resolved_secret_scopes"] == {"OPENAI_API_KEY": "user"}
    runs = cli.json("benchmark", "runs", "list")
    assert [r["name"] for r in runs["items"]] == [name]

    logs = cli.json("benchmark", "runs", "logs", name, "--limit", "200")
    steps = [entry["step"] for entry in logs["items"]]
    assert steps[0] == "submit" and steps[-1] == "finish"
    newest = cli.json("benchmark", "runs", "logs", name, "--limit", "3")
    assert [entry["step"] for entry in newest["items"]] == steps[-3:]

    out = cli.cwd / "outputs"
    downloaded = cli.json("benchmark", "runs", "download", name, "--type", "all", "-o", str(out), "--yes")
    assert downloaded["resource"]["files_failed"] == []
    sizes = manifest_sizes(stack, submitted["id"])
    files = {p.relative_to(out).as_posix(): p.stat().st_size for p in out.rglob("*") if p.is_file()}
    assert files == sizes
    assert {"summary.csv", "results.csv", "logs.txt"} <= set(files)
    assert any(path.startswith("artifacts/hello-file/agent-1-attempt-1/") for path in files)
    assert len(list(csv.DictReader((out / "summary.csv").open()))) == 2
    assert len(list(csv.DictReader((out / "results.csv").open()))) == 4

    conflict = cli.error("benchmark", "runs", "stop", name, "--yes")
    assert conflict["code"] == "CONFLICT"

    _assert_secret_only_sealed(stack, submitted["id"], cli, out)
    cli.json("secret", "delete", "OPENAI_API_KEY", "--yes")
    assert cli.json("secret", "list")["items"] == []

    slow_tasks = tmp_path / "slow-tasks"
    _write_slow_tasks(slow_tasks, 2)
    for task in slow_tasks.iterdir():
        solve = task / "solution" / "solve.sh"
        solve.write_text(solve.read_text().replace("sleep 1.5", "sleep 60"))
    added = api.http.post(
        "/api/v1/benchmarks", json={"source_type": "folder", "path": str(slow_tasks), "name": "slow"}
    )
    assert added.status_code == 201, added.text
    api.benchmark_ready("slow")
    (cli.cwd / "slow.toml").write_text(SLOW_TOML)
    slow = cli.json("benchmark", "submit", "slow.toml", "--yes")["resource"]
    wait_status(api, slow["id"], ("running",), timeout=60)
    stopped = cli.json("benchmark", "runs", "stop", slow["name"], "--yes")
    assert stopped["status"] == "success"
    wait_status(api, slow["id"], TERMINAL, timeout=120)
    final = cli.json("benchmark", "runs", "info", slow["name"])["data"]
    assert final["benchmark_run"]["status"] == "stopped"


def _assert_secret_only_sealed(stack: Tenant, run_id: str, cli: Osmosis, downloads: Path) -> None:
    engine = create_engine(stack.database_url or "")
    with engine.connect() as conn:
        events = conn.execute(text("SELECT data::text || metadata::text FROM events")).scalars().all()
        stored = conn.execute(text("SELECT ciphertext FROM secret_values")).scalars().all()
        submitted = conn.execute(
            text("SELECT data FROM events WHERE type = 'RunSubmitted' AND stream_id = :s"),
            {"s": f"run-{run_id}"},
        ).scalar_one()
    engine.dispose()
    assert not [row for row in events if SECRET_VALUE in row]
    assert stored and all(SECRET_VALUE not in c and c.startswith("v1.") for c in stored)
    key = sealing_key(Settings(REGATTA_DATA_DIR=stack.data_dir, REGATTA_MASTER_KEY=None))
    assert load_master_key(None, stack.data_dir)
    # The run ended, so the scheduler shredded its secrets key: the blob opens with nothing now.
    assert _run_key_purged(stack, run_id)
    with pytest.raises(SealError):
        unseal(submitted["sealed_secrets"], key)
    assert not [o for o in cli.outputs if SECRET_VALUE in o]
    assert not [p for p in downloads.rglob("*") if p.is_file() and SECRET_VALUE.encode() in p.read_bytes()]
    logs = "".join(p.read_text(errors="replace") for p in (stack.data_dir / "logs").glob("*.log"))
    assert SECRET_VALUE not in logs


def _run_key_purged(stack: Tenant, run_id: str, timeout: float = 30.0) -> bool:
    """The purge consumer acts on the run's end event shortly after the API shows the run ended."""
    engine = create_engine(stack.database_url or "")
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            with engine.connect() as conn:
                left = conn.execute(
                    text("SELECT count(*) FROM run_keys WHERE run_id = :r"), {"r": run_id}
                ).scalar_one()
            if not left:
                return True
            time.sleep(0.2)
        return False
    finally:
        engine.dispose()
