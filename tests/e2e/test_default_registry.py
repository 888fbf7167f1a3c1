"""Issue 19 item 1 (and item 9's registry-file case) through the running stack: benchmarks added by name
against the default registry (a local registry.json here) and the hub (the stand-in hub), by the REST API
and by `regatta benchmark add`, each synced by the real registry-sync."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path
from typing import Any

from ..integration.harbor_hub import HarborHub
from ..integration.registry_sync_support import EXAMPLE_TASKS
from .default_registry_support import write_default_registry


def regatta(stack: Any, *args: str, cwd: Path, answer: str | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI as a script runs it (stdin not a terminal), or, with `answer`, as a person at a terminal
    who types that answer to its question."""
    environment = {**os.environ, "REGATTA_URL": stack.url, "REGATTA_TOKEN": stack.token, "COLUMNS": "200"}
    command = [sys.executable, "-m", "regatta.cli", *args]
    if answer is None:
        return subprocess.run(
            command,
            env=environment,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=300,
        )
    terminal, typed = pty.openpty()
    try:
        os.write(terminal, answer.encode())
        return subprocess.run(
            command, env=environment, cwd=cwd, stdin=typed, capture_output=True, text=True, timeout=300
        )
    finally:
        os.close(terminal)
        os.close(typed)


def settled(api: Any, name: str) -> dict[str, Any]:
    row = api.benchmark_ready(name)
    return api.get(f"/benchmarks/{row['id']}")["benchmark"]


def test_benchmarks_added_by_name_from_the_default_registry_and_the_hub(
    make_stack, api_for, tmp_path
) -> None:
    folder = tmp_path / "registry"
    registry = write_default_registry(folder)
    hub = HarborHub().start()
    try:
        tasks = [hub.publish_task("acme", EXAMPLE_TASKS / name) for name in ("hello-file", "rot13")]
        hub.publish_dataset("acme", "mini", tasks, ["latest", "v1"])
        stack = make_stack(
            executors=1,
            REGATTA_DEFAULT_REGISTRY=str(registry),
            HARBOR_SUPABASE_URL=hub.url,
            HARBOR_SUPABASE_PUBLISHABLE_KEY="sb_publishable_standin",
            REGATTA_OUTBOUND_ALLOW="127.0.0.1",  # the stand-in hub
        )
        api = api_for(stack)
        for body in (
            {"dataset": "tiny-bench"},
            {"dataset": "tiny-bench@0.9", "name": "tiny-old"},
            {"dataset": "acme/mini"},
        ):
            response = api.http.post("/api/v1/benchmarks", json=body)
            assert response.status_code == 201, response.text
        latest, old, from_hub = (settled(api, n) for n in ("tiny-bench", "tiny-old", "acme/mini"))
    finally:
        hub.stop()

    assert (latest["sync_status"], latest["version"], latest["task_count"]) == ("ready", "1.0", 3), latest
    assert (old["sync_status"], old["version"], old["task_count"]) == ("ready", "0.9", 1), old
    # Added without a version: keyed as following the newest one.
    assert latest["source_type"] == "registry" and latest["source_ref"] == "tiny-bench@latest"
    assert from_hub["sync_status"] == "ready", from_hub.get("sync_error")
    assert sorted(t["name"] for t in from_hub["tasks"]) == ["acme/hello-file", "acme/rot13"]

    unknown = api.http.post("/api/v1/benchmarks", json={"dataset": "tiny-bnch@1.0"})
    assert unknown.status_code == 400 and unknown.json()["field"] == "dataset"
    assert (
        unknown.json()["message"]
        == "dataset 'tiny-bnch' is not in the default registry; close names: tiny-bench"
    )
    listed = api.get("/registry/datasets", q="tiny")
    assert [(d["dataset"], d["task_count"]) for d in listed["datasets"]] == [
        ("tiny-bench@1.0", 3),
        ("tiny-bench@0.9", 1),
    ]

    # --- the CLI ---------------------------------------------------------------------------------------
    before = len(api.get("/benchmarks")["benchmarks"])
    typo = regatta(stack, "benchmark", "add", "helo-bench", cwd=tmp_path)
    assert typo.returncode == 1 and "close names: hello-bench" in typo.stdout, typo.stdout
    # A registry file with several datasets and no --dataset: the exact commands to type, nothing added.
    several = regatta(stack, "benchmark", "add", "./registry.json", cwd=folder)
    assert several.returncode == 2, several.stdout + several.stderr
    assert several.stderr.splitlines() == [
        "./registry.json lists 4 datasets. Add one of them with:",
        "  regatta benchmark add ./registry.json --dataset tiny-bench@1.0",
        "  regatta benchmark add ./registry.json --dataset tiny-bench@0.9",
        "  regatta benchmark add ./registry.json --dataset hello-bench@2.0",
        "  regatta benchmark add ./registry.json --dataset long-description-bench@2026.11.30-rc.1",
    ]
    folder_given = regatta(stack, "benchmark", "add", "./tasks", cwd=folder)
    assert folder_given.returncode == 2
    assert "regatta benchmark add ./tasks --folder" in folder_given.stderr.splitlines()[-1]
    # At a terminal it asks which one instead. tiny-bench@0.9 of this registry is `tiny-old` already, and
    # the same source and version is refused (409): removed first, so the picker may add it again.
    assert api.http.delete(f"/api/v1/benchmarks/{old['id']}").status_code == 204
    before -= 1
    picked = regatta(
        stack, "benchmark", "add", "./registry.json", "--name", "cli-picked", cwd=folder, answer="9\n2\n"
    )
    assert picked.returncode == 0, picked.stdout + picked.stderr
    assert "  2. tiny-bench@0.9" in picked.stdout and "Which dataset" in picked.stdout
    assert "A number from 1 to 4, please." in picked.stdout  # 9 was asked again
    assert (settled(api, "cli-picked")["version"], settled(api, "cli-picked")["task_count"]) == ("0.9", 1)
    before += 1
    missing = regatta(stack, "benchmark", "add", "./nowhere.json", cwd=folder)
    assert missing.returncode == 2 and "./nowhere.json: no such file" in missing.stderr
    assert len(api.get("/benchmarks")["benchmarks"]) == before

    # One of them named, and a registry file with a single dataset: added and synced.
    single = write_default_registry(
        tmp_path / "single", [{"name": "solo", "version": "1", "description": "", "tasks": 2}]
    )
    for args, cwd in (
        (("./registry.json", "--dataset", "hello-bench", "--name", "cli-file"), folder),
        (("registry.json", "--name", "cli-single"), single.parent),
        (("hello-bench@2.0", "--name", "cli-name"), tmp_path),
    ):
        added = regatta(stack, "benchmark", "add", *args, cwd=cwd)
        assert added.returncode == 0, (args, added.stdout, added.stderr)
    shown = {n: settled(api, n) for n in ("cli-file", "cli-single", "cli-name")}
    assert {n: (b["sync_status"], b["version"], b["task_count"]) for n, b in shown.items()} == {
        "cli-file": ("ready", "2.0", 2),
        "cli-single": ("ready", "1", 2),
        "cli-name": ("ready", "2.0", 2),
    }

    found = regatta(stack, "benchmark", "search", "greetings", "--json", cwd=tmp_path)
    assert found.returncode == 0, found.stderr
    assert [d["dataset"] for d in json.loads(found.stdout)["datasets"]] == ["hello-bench@2.0"]
    table = regatta(stack, "benchmark", "search", "tiny", cwd=tmp_path)
    assert "tiny-bench@0.9" in table.stdout and "Three tiny tasks that write a file" in table.stdout
