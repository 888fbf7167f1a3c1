"""Multi-host: the same run of real container attempts on 1 and then 2 executor hosts of equal size
(regatta.multihost: each host its own network and PID namespace and Docker engine, a 3-server NATS
cluster at R3, Postgres), the 1→2 ratio; then, on 2 hosts, what each fault costs: the run's extra wall
time over the fault-free run, and how long the faulted part takes to answer again. Needs root.

    .venv/bin/python bench/multihost.py [--tasks 6] [--attempts 2] [--sleep 4] [--slots 2]
"""

from __future__ import annotations

import argparse
import signal
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from _common import machine_state, postgres_database
from _stack import write_trivial_tasks
from regatta_executor.container.engine import LABEL_MANAGED

from regatta.multihost.cluster import Cluster

ACK_WAIT = 6.0


class Bench:
    def __init__(self, cluster: Cluster, attempts: int, concurrency: int) -> None:
        self.cluster = cluster
        self.attempts = attempts
        self.concurrency = concurrency
        self.http = httpx.Client(
            base_url=cluster.url, timeout=60, headers={"Authorization": f"Bearer {cluster.token}"}
        )

    def add_folder(self, path: Path) -> None:
        self.http.post(
            "/api/v1/benchmarks", json={"source_type": "folder", "path": str(path), "name": "bench"}
        )

        def ready() -> bool:
            rows = self.http.get("/api/v1/benchmarks").json()["benchmarks"]
            return any(r["name"] == "bench" and r["sync_status"] == "ready" for r in rows)

        self._until(ready)

    def submit(self) -> str:
        toml = (
            '[experiment]\nbenchmark = "bench"\n[[agents]]\nharness = "oracle"\n[agents.model]\n'
            f'type = "hosted"\nbase_model = "none"\n[execution]\nattempts_per_task = {self.attempts}\n'
            f"max_concurrent_attempts = {self.concurrency}\n"
        )
        response = self.http.post(
            "/api/v1/runs", content=toml.encode(), headers={"Content-Type": "application/toml"}
        )
        assert response.status_code == 201, response.text
        return response.json()["id"]

    def finish(self, run_id: str) -> dict[str, Any]:
        def done() -> dict[str, Any] | None:
            try:
                detail = self.http.get(f"/api/v1/runs/{run_id}").json()
            except httpx.HTTPError:
                return None  # the gateway is being restarted
            return detail if detail["benchmark_run"]["status"] in ("finished", "failed", "stopped") else None

        detail = self._until(done, timeout=900)
        assert detail["benchmark_run"]["status"] == "finished", detail["benchmark_run"]
        return detail

    def timed_run(self, fault: Callable[[], float | None] | None = None) -> tuple[float, float | None]:
        """The run's wall time from submission to `finished`, and what `fault` measured (it is called
        once attempts run on the first host)."""
        started = time.perf_counter()
        run_id = self.submit()
        measured = None
        if fault is not None:
            host = next(h for h in self.cluster.hosts.values() if h.alive())
            self._until(lambda: self._busy(host))
            measured = fault()
        self.finish(run_id)
        return time.perf_counter() - started, measured

    def _busy(self, host: Any) -> bool:
        engine = host.engine()
        try:
            return bool(engine.api.containers(filters={"label": LABEL_MANAGED}))
        finally:
            engine.close()

    @staticmethod
    def _until(predicate: Callable[[], Any], timeout: float = 600.0) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(0.05)
        raise TimeoutError("condition not reached")


def cluster_of(root: Path, database: str, hosts: int, slots: int) -> Cluster:
    cluster = Cluster(
        root,
        database,
        env={
            "REGATTA_EXECUTOR_SLOTS": str(slots),
            "REGATTA_JOB_ACK_WAIT": str(ACK_WAIT),
            "REGATTA_EXECUTOR_GRACE_SEC": "1",
            "REGATTA_LOG_LEVEL": "WARNING",
        },
    )
    cluster.start(hosts=hosts)
    return cluster


def faults(cluster: Cluster) -> dict[str, Callable[[], float | None]]:
    """Each fault, returning how long what it broke took to answer again (None: nothing to wait for, or
    it never comes back)."""
    assert cluster.nats is not None and cluster.network is not None and cluster.control is not None
    nats, network, control = cluster.nats, cluster.network, cluster.control

    def kill_host() -> None:
        next(h for h in cluster.hosts.values() if h.alive()).kill()

    def kill_nats_server() -> float:
        nats.kill(0)
        began = time.perf_counter()
        nats.start(0)
        nats.wait_ready()
        return time.perf_counter() - began

    def kill_gateway_and_scheduler() -> float:
        control.kill("gateway", signal.SIGKILL)
        control.kill("run-scheduler", signal.SIGKILL)
        began = time.perf_counter()
        control.restart("run-scheduler")
        control.restart("gateway")
        control.wait_ready()
        return time.perf_counter() - began

    def partition_host() -> float:
        index = next(h for h in cluster.hosts.values() if h.alive()).index
        network.partition(index)
        time.sleep(ACK_WAIT * 2)  # the fault itself: longer than the ack wait
        network.heal(index)
        return None

    return {
        "gateway + scheduler killed, restarted": kill_gateway_and_scheduler,
        "NATS server killed, restarted": kill_nats_server,
        f"host cut off the bus {ACK_WAIT * 2:.0f} s, healed": partition_host,
        "host killed whole, never back": kill_host,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=6)
    parser.add_argument("--attempts", type=int, default=2)
    parser.add_argument("--sleep", type=float, default=4.0)
    parser.add_argument("--slots", type=int, default=2)
    args = parser.parse_args()
    total = args.tasks * args.attempts
    print(machine_state(), flush=True)
    seconds: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tasks = write_trivial_tasks(Path(tmp) / "tasks", args.tasks, sleep=args.sleep)
        for hosts in (1, 2):
            # Each configuration may run as many attempts at once as its slots: equal hosts, more of them.
            with postgres_database(f"bench_multihost_{hosts}") as own:
                cluster = cluster_of(Path(tmp) / f"cluster-{hosts}", own, hosts, args.slots)
                try:
                    bench = Bench(cluster, args.attempts, hosts * args.slots)
                    bench.add_folder(tasks)
                    bench.timed_run()  # warm: each host builds the task images once
                    seconds[hosts], _ = bench.timed_run()
                    print(
                        f"{hosts} host(s) x {args.slots} slots: {seconds[hosts]:6.1f} s  "
                        f"{total / seconds[hosts]:5.2f} attempts/s",
                        flush=True,
                    )
                    if hosts == 2:
                        for name, fault in faults(cluster).items():
                            wall, back = bench.timed_run(fault)
                            came_back = f"{back:5.1f} s" if back is not None else "  -"
                            print(
                                f"{name:40s} run {wall:6.1f} s (+{wall - seconds[2]:5.1f} s), "
                                f"back in {came_back}",
                                flush=True,
                            )
                finally:
                    cluster.teardown()
    print(f"ratio 1→2 hosts: {seconds[1] / seconds[2]:.2f}x (goal ≥ 1.7x)")


if __name__ == "__main__":
    main()
