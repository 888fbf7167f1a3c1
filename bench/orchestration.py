"""Orchestration vs Harbor: the same trivial tasks, the same `local` environment class and the same
concurrency, run (a) by Harbor's own in-process Job and (b) end to end through Regatta (REST submit →
finished). Prints attempts/s of each and the ratio (budget: Regatta ≥ 1.0× Harbor).

    .venv/bin/python bench/orchestration.py [--tasks 10] [--attempts 10] [--concurrency 8] [--executors 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

from _stack import StackClient, write_trivial_tasks

LOCAL = "regatta_executor.local_environment:LocalEnvironment"


async def harbor_job(tasks: Path, attempts: int, concurrency: int, jobs_dir: Path) -> float:
    from harbor.job import Job
    from harbor.models.job.config import JobConfig

    config = JobConfig(
        job_name="bench",
        jobs_dir=jobs_dir,
        n_attempts=attempts,
        n_concurrent_trials=concurrency,
        quiet=True,
        agents=[{"name": "oracle"}],
        datasets=[{"path": str(tasks)}],
        environment={"import_path": LOCAL, "delete": True},
    )
    job = await Job.create(config)
    started = time.perf_counter()
    await job.run()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--attempts", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--executors", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("HARBOR_TELEMETRY", "0")
    total = args.tasks * args.attempts
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        tasks = write_trivial_tasks(root / "tasks", args.tasks)
        harbor_seconds = asyncio.run(harbor_job(tasks, args.attempts, args.concurrency, root / "jobs"))
        slots = max(1, args.concurrency // args.executors)
        with StackClient(root / "stack", args.executors, slots) as client:
            client.add_folder(tasks, "bench")
            client.run("bench", 1, args.concurrency)  # warm-up: caches, imports, consumers
            regatta_seconds, detail = client.run("bench", args.attempts, args.concurrency)
        assert detail["benchmark_run"]["status"] == "finished", detail["benchmark_run"]
    harbor_rate, regatta_rate = total / harbor_seconds, total / regatta_seconds
    print(
        f"workload: {args.tasks} tasks x {args.attempts} attempts = {total} oracle trials, "
        f"concurrency {args.concurrency}, Regatta with {args.executors} executors x {slots} slots"
    )
    print(f"{'':24}{'seconds':>10}{'attempts/s':>12}")
    print(f"{'Harbor Job (in-process)':24}{harbor_seconds:>10.2f}{harbor_rate:>12.1f}")
    print(f"{'Regatta (REST → finished)':24}{regatta_seconds:>10.2f}{regatta_rate:>12.1f}")
    verdict = "meets" if regatta_rate >= harbor_rate else "MISSES"
    print(f"ratio Regatta / Harbor = {regatta_rate / harbor_rate:.2f}x ({verdict} the ≥ 1.0x budget)")


if __name__ == "__main__":
    main()
