"""What the registry-sync integration tests share: the real service layer over a real event store and the
real NATS object store, the gateway's real projection to read what users see, and task/repo builders."""

from __future__ import annotations

import io
import ipaddress
import json
import os
import shutil
import ssl
import subprocess
import tarfile
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import nats
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from regatta_gateway.queries.benchmarks import benchmark_summary
from regatta_gateway.readmodels import tables as t
from regatta_gateway.readmodels.projection import ReadModels
from regatta_registry_sync.archive_store import NatsArchiveStore
from regatta_registry_sync.sync import BenchmarkSync, initial_sync_id
from regatta_shared.events import BenchmarkAdded, BenchmarkSource, BenchmarkSyncRequested
from regatta_shared.events.envelope import new_event
from regatta_shared.eventstore import EventStore
from regatta_shared.eventstore.projections import ProjectionRunner
from regatta_shared.ids import benchmark_stream, new_id
from regatta_shared.messaging.bus import TASKS_BUCKET, ensure_streams
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

    def add(self, source: BenchmarkSource, name: str = "bench", *, trusted: bool = True) -> str:
        """As the gateway records it; `trusted` as for a platform administrator, whose host paths are
        not limited to REGATTA_SOURCE_ROOTS (these tests read tmp folders)."""
        source = source.model_copy(update={"trusted": trusted})
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


def self_signed_certificate(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 (and its key), trusted by git through GIT_SSL_CAINFO."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.now(UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    folder.mkdir(parents=True, exist_ok=True)
    cert, key_file = folder / "cert.pem", folder / "key.pem"
    cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert, key_file


class _GitHttpBackend(BaseHTTPRequestHandler):
    """git's smart HTTP protocol: each request handed to `git http-backend` as a CGI script."""

    base: Path

    def do_GET(self) -> None:
        self._cgi(b"")

    def do_POST(self) -> None:
        self._cgi(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

    def _cgi(self, body: bytes) -> None:
        path, _, query = self.path.partition("?")
        env = {
            "PATH": os.environ.get("PATH", ""),
            "GIT_PROJECT_ROOT": str(self.base),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            # git gzips a request of many wants; http-backend inflates it when told.
            "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
            "CONTENT_LENGTH": str(len(body)),
            "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
            "REMOTE_ADDR": "127.0.0.1",
        }
        result = subprocess.run(
            ["git", "http-backend"], input=body, env=env, capture_output=True, check=False
        )
        head, _, payload = result.stdout.partition(b"\r\n\r\n")
        status = 200
        headers = []
        for line in head.decode(errors="replace").split("\r\n"):
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = int(value.split()[0])
            elif key:
                headers.append((key, value.strip()))
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def git_https_server(base: Path, port: int, certs: Path) -> Iterator[str]:
    """An https git server on 127.0.0.1 for the repositories under `base` (git http-backend); git trusts
    its certificate through GIT_SSL_CAINFO, which the caller sets."""
    base.mkdir(parents=True, exist_ok=True)
    cert, key = self_signed_certificate(certs)
    handler = type("Handler", (_GitHttpBackend,), {"base": base})
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
