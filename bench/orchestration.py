"""Orchestration vs Harbor: the same trivial tasks, the same `local` environment class and the same
concurrency, run (a) by Harbor's own in-process Job and (b) end to end through Regatta (REST submit →
finished). Prints attempts/s of each and the ratio (budget: Regatta ≥ 1.0× Harbor).

    .venv/bin/python bench/orchestration.py [--tasks 10] [--attempts 10] [--concurrency 8]
        [--executors 2] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from _procs import cpu_by_command, machine_busy_seconds
from _stack import StackClient, write_trivial_tasks

from regatta.services import SERVICES as PLATFORM_SERVICES

LOCAL = "regatta_executor.local.environment:LocalEnvironment"
# How the stack's processes are told apart by their command line (executors: one line for all).
SERVICES = (*(service.module.removeprefix("regatta_") for service in PLATFORM_SERVICES), "nats-server")


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
    result = await job.run()
    elapsed = time.perf_counter() - started
    rewards = [
        (t.verifier_result.rewards or {}).get("reward") if t.verifier_result else None
        for t in result.trial_results
    ]
    # A broken sandbox (no bwrap, say) fails every trial fast: such a round measures nothing.
    if len(rewards) != attempts * len(list(tasks.iterdir())) or any(r != 1 for r in rewards):
        raise SystemExit(f"Harbor's trials did not all pass: rewards {rewards}")
    return elapsed


def check_all_passed(detail: dict[str, Any], total: int) -> None:
    run, passed = detail["benchmark_run"], detail["totals"]["passed"]
    if run["status"] != "finished" or passed != total:
        raise SystemExit(f"Regatta's run did not pass every attempt ({passed} of {total}): {run}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--attempts", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--executors", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("HARBOR_TELEMETRY", "0")
    total = args.tasks * args.attempts
    slots = max(1, args.concurrency // args.executors)
    rounds: list[tuple[float, float]] = []
    cpu: dict[str, list[float]] = {"Harbor": [], "Regatta": []}  # machine CPU seconds per trial
    per_service: dict[str, list[float]] = defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        tasks = write_trivial_tasks(root / "tasks", args.tasks)
        # The same environment class on both sides: Harbor's trial runs LOCAL, so the stack's executors do
        # too, whatever `auto` would pick on this machine (containers where a Docker engine answers).
        pinned = {"REGATTA_EXECUTOR_ENVIRONMENT": "local"}
        with StackClient(root / "stack", args.executors, slots, **pinned) as client:
            client.add_folder(tasks, "bench")
            # Warm-up of both contenders: imports, caches, consumers.
            asyncio.run(harbor_job(tasks, 1, args.concurrency, root / "jobs-warm"))
            client.run("bench", 1, args.concurrency)
            # Interleaved rounds, the order alternating, so that the machine's noise falls on both.
            for r in range(args.rounds):
                harbor = regatta = 0.0
                for contender in ("harbor", "regatta") if r % 2 == 0 else ("regatta", "harbor"):
                    busy = machine_busy_seconds()
                    if contender == "harbor":
                        jobs = root / f"jobs-{r}"
                        harbor = asyncio.run(harbor_job(tasks, args.attempts, args.concurrency, jobs))
                        cpu["Harbor"].append((machine_busy_seconds() - busy) / total)
                    else:
                        stack = cpu_by_command(os.getpid(), SERVICES)
                        regatta, detail = client.run("bench", args.attempts, args.concurrency)
                        cpu["Regatta"].append((machine_busy_seconds() - busy) / total)
                        check_all_passed(detail, total)
                        for name, seconds in cpu_by_command(os.getpid(), SERVICES).items():
                            per_service[name].append((seconds - stack.get(name, 0.0)) / total)
                rounds.append((harbor, regatta))
                ratio = harbor / regatta
                print(f"round {r + 1}: Harbor {harbor:.2f} s, Regatta {regatta:.2f} s, ratio {ratio:.2f}x")
    print(
        f"workload: {args.tasks} tasks x {args.attempts} attempts = {total} oracle trials, "
        f"concurrency {args.concurrency}, Regatta with {args.executors} executors x {slots} slots; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    harbor_seconds = statistics.median(h for h, _ in rounds)
    regatta_seconds = statistics.median(g for _, g in rounds)
    ratio = statistics.median(h / g for h, g in rounds)
    print(f"{'median of ' + str(len(rounds)) + ' rounds':28}{'seconds':>10}{'attempts/s':>12}")
    print(f"{'Harbor Job (in-process)':28}{harbor_seconds:>10.2f}{total / harbor_seconds:>12.1f}")
    print(f"{'Regatta (REST → finished)':28}{regatta_seconds:>10.2f}{total / regatta_seconds:>12.1f}")
    # The machine's CPU per trial (sandboxes included) tells where a CPU-bound round's time went.
    for name, values in cpu.items():
        print(f"machine CPU per trial, {name}: {statistics.median(values) * 1000:.0f} ms (median)")
    split = sorted(((statistics.median(v) * 1000, n) for n, v in per_service.items()), reverse=True)
    print("  of which Regatta's processes: " + ", ".join(f"{n} {ms:.1f} ms" for ms, n in split))
    verdict = "meets" if ratio >= 1.0 else "MISSES"
    print(f"ratio Regatta / Harbor (attempts/s, median of rounds) = {ratio:.2f}x ({verdict} ≥ 1.0x)")


if __name__ == "__main__":
    main()
