"""Gateway CPU per request, one endpoint at a time: where a read's time goes before any load.

Run on a database made by `bench/gateway_load.py --keep`:

    .venv/bin/python bench/gateway_cpu.py --database <the URL it printed> [--requests 200]

Starts the real gateway (uvicorn, one process) as gateway_load.py does, warms it up, then sends each
request `--requests` times in sequence and prints the gateway's CPU time (user + system, from /proc)
and the wall time per request. No budget: context for the open-loop figures of gateway_load.py.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import httpx
from _common import machine_state, table
from _procs import family_cpu_seconds
from gateway_load import BENCHMARK, TOKEN, start_gateway, warm_up


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database", required=True, help="a database made with gateway_load.py --keep")
    parser.add_argument("--requests", type=int, default=200, help="requests per endpoint (default 200)")
    args = parser.parse_args()
    run = "run_bench00"
    cases = [
        ("GET /health (no auth)", "/health", None),
        ("GET /benchmarks", "/api/v1/benchmarks", None),
        ("GET leaderboard", f"/api/v1/benchmarks/{BENCHMARK}/leaderboard", None),
        ("GET run page", f"/api/v1/runs/{run}", None),
        ("GET 50 attempts", f"/api/v1/runs/{run}/attempts", {"limit": 50, "offset": 5000}),
        ("GET 50 log lines", f"/api/v1/runs/{run}/logs", {"limit": 50}),
    ]
    print(f"machine: {machine_state()}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="regatta-gwcpu-") as tmp:
        gateway, nats, base = start_gateway(args.database, Path(tmp))
        try:
            warm_up(base, [run])
            headers = {"Authorization": f"Bearer {TOKEN}"}
            with httpx.Client(base_url=base, headers=headers, timeout=60) as http:
                for label, path, params in cases:
                    for _ in range(20):
                        http.get(path, params=params).raise_for_status()
                    cpu, started = family_cpu_seconds(gateway.pid), time.perf_counter()
                    for _ in range(args.requests):
                        response = http.get(path, params=params)
                        response.raise_for_status()
                    cpu = family_cpu_seconds(gateway.pid) - cpu
                    wall = time.perf_counter() - started
                    rows.append(
                        [
                            label,
                            f"{cpu / args.requests * 1000:.2f}",
                            f"{wall / args.requests * 1000:.2f}",
                            f"{len(response.content):,}",
                        ]
                    )
        finally:
            gateway.terminate()
            gateway.wait(timeout=30)
            nats.terminate()
            nats.wait(timeout=30)
    print(table(["request", "gateway CPU ms", "wall ms", "bytes"], rows))


if __name__ == "__main__":
    main()
