"""Shared helpers of the benchmark scripts: generated tasks, the embedded stack, timing a run."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import httpx

from regatta import nats_server
from regatta.stack import Stack

ROOT = Path(__file__).resolve().parents[1]


def write_trivial_tasks(root: Path, count: int, sleep: float = 0.0) -> Path:
    for index in range(count):
        task = root / f"bench-{index:03d}"
        for folder in ("tests", "solution", "environment"):
            (task / folder).mkdir(parents=True, exist_ok=True)
        (task / "task.toml").write_text(
            '[metadata]\ncategory = "bench"\n[agent]\ntimeout_sec = 120\n[verifier]\ntimeout_sec = 120\n'
            '[environment]\nnetwork_mode = "no-network"\n'
        )
        (task / "instruction.md").write_text("Write done to /app/out.txt\n")
        (task / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
        solve = (f"sleep {sleep}\n" if sleep else "") + "echo done > /app/out.txt\n"
        (task / "solution" / "solve.sh").write_text("#!/bin/bash\n" + solve)
        (task / "tests" / "test.sh").write_text(
            "#!/bin/bash\nif grep -q done /app/out.txt; then echo 1; else echo 0; fi"
            " > /logs/verifier/reward.txt\n"
        )
    return root


class StackClient:
    def __init__(self, data_dir: Path, executors: int, slots: int, **env: str) -> None:
        self.stack = Stack(
            data_dir=data_dir,
            port=nats_server.free_port(),
            executors=executors,
            extra_env={"REGATTA_EXECUTOR_SLOTS": str(slots), "REGATTA_LOG_LEVEL": "WARNING", **env},
        )
        self.http: httpx.Client | None = None

    def __enter__(self) -> StackClient:
        try:
            self.stack.start()
        except RuntimeError:
            # The logs live in the caller's temporary folder, gone once the error has propagated.
            for log in sorted(self.stack.logs.glob("*.log")):
                tail = log.read_text(errors="replace").splitlines()[-40:]
                print(f"--- {log.name} (last {len(tail)} lines)", *tail, sep="\n")
            raise
        self.http = httpx.Client(
            base_url=self.stack.url, timeout=60, headers={"Authorization": f"Bearer {self.stack.token}"}
        )
        return self

    def __exit__(self, *_: Any) -> None:
        self.stack.stop()

    def add_folder(self, path: Path, name: str) -> None:
        assert self.http is not None
        self.http.post("/api/v1/benchmarks", json={"source_type": "folder", "path": str(path), "name": name})
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            rows = self.http.get("/api/v1/benchmarks").json()["benchmarks"]
            if any(r["name"] == name and r["sync_status"] == "ready" for r in rows):
                return
            time.sleep(0.2)
        raise TimeoutError(f"benchmark {name} did not sync")

    def run(self, benchmark: str, attempts: int, concurrency: int) -> tuple[float, dict[str, Any]]:
        """Submit a run and time it from the REST call to `finished`."""
        assert self.http is not None
        toml = (
            f'[experiment]\nbenchmark = "{benchmark}"\n[[agents]]\nharness = "oracle"\n[agents.model]\n'
            f'type = "hosted"\nbase_model = "none"\n[execution]\nattempts_per_task = {attempts}\n'
            f"max_concurrent_attempts = {concurrency}\n"
        )
        started = time.perf_counter()
        created = self.http.post(
            "/api/v1/runs", content=toml.encode(), headers={"Content-Type": "application/toml"}
        ).json()
        while True:
            detail = self.http.get(f"/api/v1/runs/{created['id']}").json()
            if detail["benchmark_run"]["status"] in ("finished", "failed", "stopped"):
                return time.perf_counter() - started, detail
            time.sleep(float(os.environ.get("BENCH_POLL", "0.05")))
