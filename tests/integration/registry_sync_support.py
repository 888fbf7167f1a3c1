"""What the registry-sync integration tests share: the real service layer over a real event store and the
real NATS object store, the gateway's real projection to read what users see, and task/repo builders."""

from __future__ import annotations

import io
import json
import shutil
import socket
import subprocess
import tarfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import nats
from regatta_gateway.queries import benchmark_summary
from regatta_gateway.readmodels import tables as t
from regatta_gateway.readmodels.projection import ReadModels
from regatta_registry_sync.archive_store import NatsArchiveStore
from regatta_registry_sync.sync import BenchmarkSync, initial_sync_id
from regatta_shared.bus import TASKS_BUCKET, ensure_streams
from regatta_shared.events import BenchmarkAdded, BenchmarkSource, BenchmarkSyncRequested
from regatta_shared.eventstore import EventStore
from regatta_shared.eventstore.records import new_event
from regatta_shared.ids import benchmark_stream, new_id
from regatta_shared.projections import ProjectionRunner
from sqlalchemy import select

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_TASKS = ROOT / "examples" / "tasks"
CATEGORIES = ["math", "text", "files", "scripting", "data"]
DIFFICULTIES = ["easy", "medium", "hard", "unknown"]


class SyncHarness:
    def __init__(self, store: EventStore, sync: BenchmarkSync, bucket: Any) -> None:
        self.store = store
        self.sync = sync
        self.bucket = bucket
        self.projection = ProjectionRunner(store, ReadModels())
        self.projection.create_tables()

    def add(self, source: BenchmarkSource, name: str = "bench") -> str:
        benchmark_id = new_id("bm")
        added = BenchmarkAdded(benchmark_id=benchmark_id, workspace_id="ws", name=name, source=source)
        self.store.append(benchmark_stream(benchmark_id), [new_event(added, actor="tester")], 0)
        return benchmark_id

    async def first_sync(self, benchmark_id: str, **kwargs: Any) -> dict[str, Any]:
        await self.sync.run(benchmark_id, initial_sync_id(benchmark_id), **kwargs)
        return self.benchmark(benchmark_id)

    async def retry(self, benchmark_id: str) -> dict[str, Any]:
        """What the gateway's Retry sync appends: a new BenchmarkSyncRequested, then the service runs it."""
        sync_id = new_id("sync")
        requested = BenchmarkSyncRequested(benchmark_id=benchmark_id, sync_id=sync_id)
        self.store.append(benchmark_stream(benchmark_id), [new_event(requested, actor="tester")])
        await self.sync.run(benchmark_id, sync_id)
        return self.benchmark(benchmark_id)

    def benchmark(self, benchmark_id: str) -> dict[str, Any]:
        """The benchmark as the API shows it (the gateway's projection and query code)."""
        self.projection.catch_up()
        with self.store.read_engine.connect() as conn:
            row = conn.execute(select(t.benchmarks).where(t.benchmarks.c.id == benchmark_id)).mappings().one()
            body = benchmark_summary(conn, dict(row))
            body["metadata"] = row["metadata"]
            tasks = conn.execute(
                select(t.benchmark_tasks)
                .where(
                    t.benchmark_tasks.c.benchmark_id == benchmark_id,
                    t.benchmark_tasks.c.sync_id == row["ready_sync_id"],
                )
                .order_by(t.benchmark_tasks.c.ordinal)
            ).mappings()
            body["tasks"] = [dict(r) for r in tasks]
        return body

    def events(self, benchmark_id: str, event_type: str | None = None) -> list[Any]:
        stream = self.store.read_stream(benchmark_stream(benchmark_id))
        return [e for e in stream if event_type is None or e.type == event_type]

    async def archive_files(self, digest: str) -> dict[str, bytes]:
        """A task archive as an executor gets it from the object store, by digest."""
        result = await self.bucket.get(digest)
        files = {}
        with tarfile.open(fileobj=io.BytesIO(result.data or b""), mode="r:gz") as archive:
            for member in archive.getmembers():
                handle = archive.extractfile(member)
                if handle is not None:
                    files[member.name] = handle.read()
        return files


@asynccontextmanager
async def sync_harness(database_url: str, nats_url: str, page_size: int = 100) -> AsyncIterator[SyncHarness]:
    store = EventStore(database_url)
    store.create_schema()
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        await ensure_streams(js)
        bucket = await js.object_store(TASKS_BUCKET)
        yield SyncHarness(store, BenchmarkSync(store, NatsArchiveStore(bucket), page_size=page_size), bucket)
    finally:
        await nc.close()
        store.dispose()


def folder_source(path: Path, **extra: Any) -> BenchmarkSource:
    return BenchmarkSource(type="folder", ref=str(path), **extra)


def registry_source(registry: Path, dataset: str, **extra: Any) -> BenchmarkSource:
    name, _, version = dataset.partition("@")
    return BenchmarkSource(
        type="registry",
        ref=dataset,
        registry_path=str(registry),
        dataset=name,
        version=version or None,
        **extra,
    )


def copy_examples(target: Path) -> Path:
    shutil.copytree(EXAMPLE_TASKS, target)
    return target


def write_task(task: Path, index: int, category: str = "math", difficulty: str = "easy") -> None:
    for folder in ("tests", "solution", "environment"):
        (task / folder).mkdir(parents=True, exist_ok=True)
    (task / "task.toml").write_text(
        f'[metadata]\ncategory = "{category}"\ndifficulty = "{difficulty}"\n'
        f'tags = ["generated", "n{index % 7}"]\n[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n'
    )
    (task / "instruction.md").write_text(f"Write {index} to /app/out.txt\n")
    (task / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    (task / "solution" / "solve.sh").write_text(f"#!/bin/bash\necho {index} > /app/out.txt\n")
    (task / "tests" / "test.sh").write_text(
        f"#!/bin/bash\nif grep -qx {index} /app/out.txt; then echo 1; else echo 0; fi"
        " > /logs/verifier/reward.txt\n"
    )
    for script in (task / "solution" / "solve.sh", task / "tests" / "test.sh"):
        script.chmod(0o755)


def generate_registry(root: Path, count: int, dataset: str = "generated", version: str = "1.0") -> Path:
    """`count` tasks cycling through five categories and four difficulties, listed in a registry.json."""
    entries = []
    for index in range(count):
        name = f"gen-{index:04d}"
        write_task(root / "tasks" / name, index, CATEGORIES[index % 5], DIFFICULTIES[index % 4])
        entries.append({"name": name, "path": f"tasks/{name}"})
    registry = root / "registry.json"
    registry.write_text(
        json.dumps([{"name": dataset, "version": version, "description": "", "tasks": entries}])
    )
    return registry


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def init_repo(repo: Path) -> None:
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "tests@regatta.local")
    git(repo, "config", "user.name", "tests")


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@contextmanager
def git_daemon(base: Path, port: int) -> Iterator[str]:
    """A git:// server on 127.0.0.1 for the repositories under `base`: a remote reached with ls-remote."""
    base.mkdir(parents=True, exist_ok=True)
    command = ["git", "daemon", "--reuseaddr", "--export-all", f"--base-path={base}", "--listen=127.0.0.1"]
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    process = subprocess.Popen([*command, f"--port={port}"], **quiet)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        yield f"git://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)
