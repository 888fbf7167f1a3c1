"""Scale-out: 1, 2 and 4 executor processes (same slots each) on the same workload; speed-up 1→2
must be ≥ 1.7×. Each attempt waits like an agent waiting on its model (the solution sleeps), so the
workload is bound by attempt slots, not by this machine's two cores.

    .venv/bin/python bench/scaleout.py [--tasks 16] [--attempts 2] [--sleep 1.0] [--slots 2]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from _stack import StackClient, write_trivial_tasks


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--attempts", type=int, default=2)
    parser.add_argument("--sleep", type=float, default=1.0)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--executors", default="1,2,4")
    args = parser.parse_args()
    total = args.tasks * args.attempts
    rates: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tasks = write_trivial_tasks(Path(tmp) / "tasks", args.tasks, sleep=args.sleep)
        for count in (int(n) for n in args.executors.split(",")):
            with StackClient(Path(tmp) / f"stack-{count}", count, args.slots) as client:
                client.add_folder(tasks, "bench")
                client.run("bench", 1, count * args.slots)
                seconds, detail = client.run("bench", args.attempts, count * args.slots)
                assert detail["benchmark_run"]["status"] == "finished"
                rates[count] = total / seconds
                print(
                    f"{count} executor(s) x {args.slots} slots: {seconds:6.2f} s"
                    f"  {rates[count]:6.2f} attempts/s",
                    flush=True,
                )
    base = rates[min(rates)]
    for count, rate in sorted(rates.items()):
        print(f"speed-up 1→{count}: {rate / base:.2f}x")
    if 1 in rates and 2 in rates:
        speedup = rates[2] / rates[1]
        print(f"budget 1→2 ≥ 1.7x: {'met' if speedup >= 1.7 else 'MISSED'} ({speedup:.2f}x)")


if __name__ == "__main__":
    main()
