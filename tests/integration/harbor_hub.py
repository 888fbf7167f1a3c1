"""Stand-in for the Harbor hub (Supabase PostgREST + Storage): the outside service of the hub source.

It serves recorded datasets in the shapes Harbor's own client reads (docs/reference/harbor.md §2.2): tables
`dataset_version_tag`, `dataset_version`, `dataset_version_task`, `dataset_version_file`, the RPC
`resolve_task_version`, and objects of the Storage bucket `packages`. Every request is logged so a test can
assert that Harbor's client, not a shortcut, did the talking.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from harbor.publisher.packager import Packager


@dataclass
class HubTask:
    org: str
    name: str
    content_hash: str
    archive_path: str
    id: str = field(default_factory=lambda: str(uuid.uuid4()))


@dataclass
class HubDatasetVersion:
    org: str
    name: str
    revision: int
    content_hash: str
    tasks: list[HubTask]
    tags: list[str]
    description: str = ""
    files: list[dict[str, Any]] = field(default_factory=list)
    id: str = field(default_factory=lambda: str(uuid.uuid4()))

    def row(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "revision": self.revision,
            "content_hash": self.content_hash,
            "description": self.description,
            "yanked_at": None,
            "yanked_reason": None,
        }

    def package(self) -> dict[str, Any]:
        return {
            "id": f"pkg-{self.org}-{self.name}",
            "name": self.name,
            "type": "dataset",
            "org": {"name": self.org},
        }


class HarborHub:
    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.tasks: list[HubTask] = []
        self.datasets: list[HubDatasetVersion] = []
        self.requests: list[str] = []
        self._server: ThreadingHTTPServer | None = None

    # --- recording ----------------------------------------------------------------------------

    def publish_task(self, org: str, task_dir: Path) -> HubTask:
        content_hash, files = Packager.compute_content_hash(task_dir)
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
            for path in files:
                archive.add(str(path), arcname=path.relative_to(task_dir.resolve()).as_posix())
        archive_path = f"{org}/{task_dir.name}/{content_hash}/dist.tar.gz"
        self.objects[archive_path] = buffer.getvalue()
        task = HubTask(org=org, name=task_dir.name, content_hash=content_hash, archive_path=archive_path)
        self.tasks.append(task)
        return task

    def publish_file(self, dataset: str, name: str, content: bytes) -> dict[str, Any]:
        digest = hashlib.sha256(content).hexdigest()
        storage_path = f"{dataset}/files/{digest}/{name}"
        self.objects[storage_path] = content
        return {
            "path": name,
            "storage_path": storage_path,
            "content_hash": f"sha256:{digest}",
            "size_bytes": 0,
        }

    def publish_dataset(
        self,
        org: str,
        name: str,
        tasks: list[HubTask],
        tags: list[str],
        description: str = "",
        files: list[dict[str, Any]] | None = None,
        content_hash: str | None = None,
    ) -> HubDatasetVersion:
        files = files or []
        base = ",".join(sorted(t.content_hash for t in tasks))
        if files:
            base += ";" + ",".join(
                sorted(f"{f['path']}:{f['content_hash'].removeprefix('sha256:')}" for f in files)
            )
        revision = 1 + sum(1 for d in self.datasets if (d.org, d.name) == (org, name))
        for earlier in self.datasets:
            if (earlier.org, earlier.name) == (org, name):
                earlier.tags = [t for t in earlier.tags if t not in tags]
        version = HubDatasetVersion(
            org=org,
            name=name,
            revision=revision,
            content_hash=content_hash or hashlib.sha256(base.encode()).hexdigest(),
            tasks=tasks,
            tags=tags,
            description=description,
            files=files,
        )
        self.datasets.append(version)
        return version

    # --- serving ------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> HarborHub:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args: Any) -> None:
                return

            def do_GET(self) -> None:
                hub.requests.append(f"GET {self.path}")
                status, body, kind = hub.get(self.path)
                self._reply(status, body, kind)

            def do_HEAD(self) -> None:
                self.do_GET()

            def do_POST(self) -> None:
                hub.requests.append(f"POST {self.path}")
                length = int(self.headers.get("Content-Length") or 0)
                payload = json.loads(self.rfile.read(length) or b"null")
                status, body, kind = hub.post(self.path, payload)
                self._reply(status, body, kind)

            def _reply(self, status: int, body: bytes, kind: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def get(self, raw_path: str) -> tuple[int, bytes, str]:
        parts = urlsplit(raw_path)
        path = unquote(parts.path)
        query = dict(parse_qsl(parts.query))
        storage = "/storage/v1/object/packages/"
        if path.startswith(storage):
            data = self.objects.get(path.removeprefix(storage))
            if data is None:
                return _json(400, {"statusCode": "404", "error": "not_found", "message": "Object not found"})
            return 200, data, "application/octet-stream"
        table = path.removeprefix("/rest/v1/")
        rows = self._select(table, query)
        offset, limit = int(query.get("offset", 0)), int(query.get("limit", 1000))
        return _json(200, rows[offset : offset + limit])

    def _select(self, table: str, q: dict[str, str]) -> list[dict[str, Any]]:
        def eq(key: str) -> str | None:
            value = q.get(key)
            return value.removeprefix("eq.") if value is not None else None

        def same_package(d: HubDatasetVersion) -> bool:
            return eq("package.name") == d.name and eq("package.org.name") == d.org

        if table == "dataset_version_tag":
            return [
                {"dataset_version": d.row(), "package": d.package()}
                for d in self.datasets
                if same_package(d) and eq("tag") in d.tags
            ]
        if table == "dataset_version":
            found = [
                d
                for d in self.datasets
                if same_package(d)
                and (eq("revision") is None or str(d.revision) == eq("revision"))
                and (eq("content_hash") is None or d.content_hash == eq("content_hash"))
            ]
            return [{**d.row(), "package": d.package()} for d in found]
        by_id = {d.id: d for d in self.datasets}
        version = by_id.get(eq("dataset_version_id") or "")
        if table == "dataset_version_task" and version is not None:
            return [
                {
                    "task_version_id": t.id,
                    "task_version": {
                        "content_hash": t.content_hash,
                        "package": {"name": t.name, "org": {"name": t.org}},
                    },
                }
                for t in sorted(version.tasks, key=lambda t: t.id)
            ]
        if table == "dataset_version_file" and version is not None:
            return list(version.files)
        return []

    def post(self, path: str, payload: Any) -> tuple[int, bytes, str]:
        if path.startswith("/rest/v1/rpc/resolve_task_version"):
            ref = str(payload.get("p_ref") or "latest").removeprefix("sha256:")
            for task in self.tasks:
                if (task.org, task.name) == (payload.get("p_org"), payload.get("p_name")) and (
                    ref in (task.content_hash, "latest")
                ):
                    row = {
                        "id": task.id,
                        "archive_path": task.archive_path,
                        "content_hash": task.content_hash,
                        "revision": 1,
                        "yanked_at": None,
                        "yanked_reason": None,
                    }
                    return _json(200, row)
            return _json(200, None)
        if path.startswith("/rest/v1/") and path.removeprefix("/rest/v1/").endswith("_download"):
            return 201, b"", "application/json"
        return _json(404, {"message": f"no route {path}"})


def _json(status: int, body: Any) -> tuple[int, bytes, str]:
    return status, json.dumps(body).encode(), "application/json"
