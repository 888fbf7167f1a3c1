"""Cost of one oracle trial in Regatta's `local` environment: wall time and CPU time (this process plus
its children: bubblewrap, the sandbox's pid 1, commands), sequentially and with N trials at once.

CPU time is the figure to compare across runs: these machines are shared, and wall time under a load
average of 10+ on 2 cores mostly measures the other jobs.

    .venv/bin/python bench/local_environment.py [--trials 20] [--concurrent 16] [--task DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path

LOCAL = "regatta_executor.local.environment:LocalEnvironment"
ROOT = Path(__file__).resolve().parents[1]


def cpu_seconds() -> tuple[float, float]:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


async def main(task: Path, trials: int, concurrent: int) -> None:
    from regatta_executor.attempt.trials import run_trial

    work = Path(tempfile.mkdtemp(prefix="bench-local-"))

    def config(name: str) -> dict[str, object]:
        return {
            "task": {"path": str(task)},
            "trial_name": name,
            "trials_dir": str(work),
            "agent": {"name": "oracle"},
            "environment": {"import_path": LOCAL, "delete": True},
        }

    result = await run_trial(config("warm-up"))  # imports, caches, the janitor's first sweep
    assert result["verifier_result"]["rewards"] == {"reward": 1.0}, result.get("exception_info")
    walls = []
    own0, children0 = cpu_seconds()
    for index in range(trials):
        started = time.perf_counter()
        await run_trial(config(f"seq-{index}"))
        walls.append(time.perf_counter() - started)
    own1, children1 = cpu_seconds()
    started = time.perf_counter()
    await asyncio.gather(*(run_trial(config(f"par-{index}")) for index in range(concurrent)))
    elapsed = time.perf_counter() - started
    print(f"task {task.name}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(
        f"sequential, {trials} trials: wall median {statistics.median(walls) * 1000:.0f} ms "
        f"(min {min(walls) * 1000:.0f} ms); CPU per trial {(own1 - own0) / trials * 1000:.0f} ms in the "
        f"executor + {(children1 - children0) / trials * 1000:.0f} ms in sandbox processes"
    )
    print(f"{concurrent} at once: {elapsed:.2f} s = {concurrent / elapsed:.1f} trials/s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--concurrent", type=int, default=16)
    parser.add_argument("--task", type=Path, default=ROOT / "examples" / "tasks" / "hello-file")
    args = parser.parse_args()
    os.environ.setdefault("HARBOR_TELEMETRY", "0")
    asyncio.run(main(args.task.resolve(), args.trials, args.concurrent))
