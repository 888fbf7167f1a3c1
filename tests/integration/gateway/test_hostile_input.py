"""Issue 8 item 5, invariant 8: hostile HTTP input gets a 4xx naming the field, and changes nothing.

Huge bodies (413 before they are read), traversal in names and paths (benchmark folder sources, secret
names, run keys, artifact paths, download URLs), NUL bytes and lone surrogates, malformed JSON/TOML and
wrong content types. Every case asserts that no event, secret value or run key was stored.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from regatta_gateway.app import create_app
from regatta_gateway.http.guards import RequestGuard

from regatta import nats_server

from .conftest import Gateway, demo_config, make_settings
from .test_cli_contract import flat_error

MIB = 1024 * 1024


class Unchanged:
    """Asserts that a block of requests stored nothing: no event, no secret value, no run key."""

    def __init__(self, gw: Gateway) -> None:
        self.gw = gw

    def snapshot(self) -> tuple[int, int, int]:
        return (
            self.gw.event_count(),
            len(self.gw.raw_rows("secret_values")),
            len(self.gw.raw_rows("run_keys")),
        )

    def __enter__(self) -> Unchanged:
        self.before = self.snapshot()
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            assert self.snapshot() == self.before, "a refused request stored something"


def refused(response: Any, status: int, field: str) -> dict[str, Any]:
    body = flat_error(response, status)
    assert body.get("field") == field, body
    return body


# --- huge bodies -----------------------------------------------------------------------------------------


def test_the_guard_answers_413_after_reading_just_past_the_limit() -> None:
    """50 MiB streamed in 1 MiB chunks against a 1 MiB limit: two chunks are read, the app never runs."""
    pulled = 0
    reached_app = False

    async def receive() -> dict[str, Any]:
        nonlocal pulled
        pulled += 1
        return {"type": "http.request", "body": b"x" * MIB, "more_body": pulled < 50}

    async def app(*_: Any) -> None:
        nonlocal reached_app
        reached_app = True

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    def request(headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
        return {
            "type": "http",
            "method": "POST",
            "path": "/api/v1/benchmarks",
            "raw_path": b"/api/v1/benchmarks",
            "query_string": b"",
            "headers": [(b"content-type", b"application/json"), *headers],
        }

    guard = RequestGuard(app, max_body_bytes=MIB)
    asyncio.run(guard(request([(b"transfer-encoding", b"chunked")]), receive, send))
    assert pulled == 2 and not reached_app
    assert sent[0]["status"] == 413
    body = json.loads(sent[1]["body"])
    assert body["code"] == "PAYLOAD_TOO_LARGE" and body["field"] == "(body)" and body["max_bytes"] == MIB

    pulled, sent[:] = 0, []
    declared = [(b"content-length", str(50 * MIB).encode())]
    asyncio.run(guard(request(declared), receive, send))
    assert pulled == 0 and not reached_app and sent[0]["status"] == 413, "declared size: nothing is read"


def test_huge_bodies_get_413_on_every_kind_of_route_and_store_nothing(gateway: Gateway) -> None:
    gw = gateway
    gw.benchmark("demo", ["t1"])
    huge = b"x" * (50 * MIB)
    padded_toml = b'[experiment]\nbenchmark = "demo"\n#' + huge
    with Unchanged(gw):
        for method, path, content, content_type in [
            ("POST", "/api/v1/benchmarks", huge, "application/json"),
            ("POST", "/api/v1/runs", padded_toml, "application/toml"),
            ("POST", "/api/cli/benchmark-runs", huge, "application/json"),
            ("POST", "/api/cli/environment-secrets", huge, "application/json"),
            ("PUT", "/api/v1/workspace/budget", huge, "application/json"),
            ("POST", "/signin", huge, "application/x-www-form-urlencoded"),
        ]:
            response = gw.client.request(
                method,
                path,
                content=content,
                headers={
                    "Authorization": "Bearer rg_admin_token_for_tests",
                    "X-Osmosis-Workspace": "default",
                    "Content-Type": content_type,
                },
            )
            body = refused(response, 413, "(body)")
            assert body["code"] == "PAYLOAD_TOO_LARGE", path

        def chunks() -> Iterator[bytes]:
            for _ in range(50):
                yield b"x" * MIB

        streamed = gw.cli("POST", "/environment-secrets", content=chunks())
        refused(streamed, 413, "(body)")
    # Just under the limit the route itself answers: the limit is not what refuses a big secret.
    big_value = {"name": "BIG", "value": "v" * (1 * MIB), "scope": "user"}
    refused(gw.cli("POST", "/environment-secrets", json=big_value), 400, "value")


@pytest.fixture
def served(postgres_url: str, nats_url: str, tmp_path: Path) -> Iterator[tuple[str, int]]:
    """The gateway behind a real uvicorn (64 KiB body limit), for what only a socket can show."""
    port = nats_server.free_port()
    settings = make_settings(postgres_url, nats_url, tmp_path / "data").model_copy(
        update={"max_body_bytes": 64 * 1024, "gateway_port": port}
    )
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="error")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "the gateway did not start"
        time.sleep(0.1)
    yield "127.0.0.1", port
    server.should_exit = True
    thread.join(timeout=30)


def _exchange(address: tuple[str, int], head: bytes, *body: bytes) -> bytes:
    """Send a request head and some body chunks, then read what the server answered (bounded)."""
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(head)
        for chunk in body:
            sock.sendall(chunk)
        received = b""
        while b"\r\n\r\n" not in received:
            data = sock.recv(65536)
            if not data:
                break
            received += data
        return received


def test_a_real_server_refuses_before_the_body_is_sent(served: tuple[str, int]) -> None:
    """Declared 50 MiB, nothing sent: 413 at once. Chunked: 413 once 64 KiB passed, the body unfinished."""
    declared = (
        b"POST /api/v1/benchmarks HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer rg_admin_token_for_tests\r\n"
        b"Content-Type: application/json\r\nContent-Length: 52428800\r\n\r\n"
    )
    assert _exchange(served, declared).startswith(b"HTTP/1.1 413 ")
    chunked = declared.replace(b"Content-Length: 52428800", b"Transfer-Encoding: chunked")
    chunk = b"%x\r\n%s\r\n" % (16 * 1024, b"x" * 16 * 1024)
    assert _exchange(served, chunked, *[chunk] * 5).startswith(b"HTTP/1.1 413 ")


def test_a_real_server_refuses_raw_dot_segments(served: tuple[str, int]) -> None:
    """Clients normalise '/../' away; a raw request line keeps it, and still gets 400 naming the path."""
    head = (
        b"GET /api/v1/runs/../../../etc/passwd HTTP/1.1\r\nHost: gw\r\n"
        b"Authorization: Bearer rg_admin_token_for_tests\r\n\r\n"
    )
    answer = _exchange(served, head)
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]


# --- traversal in names and paths ----------------------------------------------------------------------

FOLDER_SOURCES = [
    ({"source_type": "folder", "path": "/srv/benchmarks/../../etc"}, "path"),
    ({"source_type": "folder", "path": "../../etc"}, "path"),
    ({"source_type": "folder", "path": "benchmarks/demo"}, "path"),
    ({"source_type": "folder", "path": "/srv/benchmarks/%2e%2e%2f%2e%2e%2fetc"}, "path"),
    ({"source_type": "folder", "path": "/srv/benchmarks/demo\u0000/x"}, "path"),
    ({"source_type": "folder", "path": "/srv/benchmarks/./demo"}, "path"),
    ({"source_type": "folder", "source_ref": "/srv/../etc"}, "source_ref"),
    ({"source_type": "registry", "registry_path": "../registry.json", "dataset": "x@1"}, "registry_path"),
    ({"source_type": "registry", "registry_path": "/srv/%2e%2e/r.json", "dataset": "x@1"}, "registry_path"),
    ({"source_type": "git", "repo": "/srv/repos/../../home/someone/repo"}, "repo"),
    ({"source_type": "git", "repo": "file:///srv/repo", "path": "../../etc"}, "path"),
]


@pytest.mark.parametrize(("body", "field"), FOLDER_SOURCES)
def test_benchmark_sources_that_walk_out_are_refused(pg_gateway: Gateway, body: dict, field: str) -> None:
    gw = pg_gateway
    with Unchanged(gw):
        refused(gw.v1("POST", "/benchmarks", json={"name": "escape", **body}), 400, field)


def test_secret_names_that_walk_paths_are_refused(gateway: Gateway) -> None:
    gw = gateway
    gw.benchmark("demo", ["t1"])
    with Unchanged(gw):
        for name in ("../X", "%2e%2e%2fX", "/etc/passwd", "X/../../Y", "A\u0000B"):
            body = {"name": name, "value": "v", "scope": "user"}
            refused(gw.v1("POST", "/secrets", json=body), 400, "name")
            refused(gw.cli("POST", "/environment-secrets", json=body), 400, "name")
            refused(
                gw.cli("DELETE", "/environment-secrets", json={"name": name, "scope": "user"}), 400, "name"
            )
        refused(gw.v1("DELETE", "/secrets", params={"name": "../X"}), 400, "name")
        refused(gw.v1("DELETE", "/secrets?name=%2e%2e%2fX"), 400, "name")
        refused(gw.v1("DELETE", "/secrets?name=A%00B"), 400, "name")
        for secrets_block, field in [
            ({"provided": {"../X": "sekrit-4c1e"}}, "secrets.provided"),
            ({"provided": {"X": ""}}, "secrets.provided"),
            ({"required": ["../X"]}, "secrets.required"),
            ({"required": ["%2e%2e%2fX"]}, "secrets.required"),
        ]:
            response = gw.cli("POST", "/benchmark-runs", json=demo_config(secrets=secrets_block))
            assert refused(response, 400, field)["code"] == "VALIDATION"
            assert "sekrit-4c1e" not in response.text, "an error never echoes a secret value"


def test_run_names_and_run_keys_that_walk_paths_are_refused(gateway: Gateway) -> None:
    gw = gateway
    gw.benchmark("demo", ["t1"])
    run_id = gw.submit(demo_config(name="a/b"))["id"]  # a slash alone is a legal run name
    with Unchanged(gw):
        for name in ("../../etc", "/abs", "a/../b", ".", "x\u0000y", "tab\there", "back\\slash", " pad "):
            refused(gw.cli("POST", "/benchmark-runs", json=demo_config(name=name)), 400, "name")
        toml = b'name = "../../x"\n[experiment]\nbenchmark = "demo"\n[[agents]]\nharness = "oracle"\n'
        toml += b'[agents.model]\ntype = "hosted"\nbase_model = "none"\n'
        response = gw.v1("POST", "/runs", content=toml, headers={"Content-Type": "application/toml"})
        refused(response, 400, "name")
        for path in (
            "/runs/..%2F..%2Fsecrets",
            "/runs/%2e%2e%2f%2e%2e%2fsecrets",
            "/runs/%2e%2e/attempts",
            "/runs/%00",
            "/runs/run%00x/logs",
        ):
            refused(gw.v1("GET", path), 400, "path")
        for path in (
            "/benchmark-runs/%2e%2e%2f%2e%2e%2fverify",
            "/benchmark-runs/..%2F",
            "/benchmark-runs/%00",
        ):
            refused(gw.cli("GET", path), 400, "path")
        refused(gw.cli("GET", "/benchmark-runs/%2Fetc%2Fpasswd"), 400, "key")
        refused(gw.cli("POST", "/benchmark-runs/%2Fetc%2Fpasswd/stop"), 400, "key")
        refused(gw.v1("GET", "/runs", params={"benchmark": "x\u0000"}), 400, "benchmark")
    assert gw.ok(gw.cli("GET", "/benchmark-runs/a%2Fb"))["benchmark_run"]["id"] == run_id


def test_artifact_paths_and_download_urls_that_walk_paths_are_refused(gateway: Gateway) -> None:
    gw = gateway
    gw.benchmark("demo", ["t1"])
    run_id = gw.submit(demo_config())["id"]
    gw.progress(run_id, artifacts={"agent/trajectory.json": b"{}"})
    manifest = gw.ok(gw.v1("GET", f"/runs/{run_id}/downloads", params={"types": "all"}))
    url = next(f["url"] for f in manifest["files"] if f["path"].startswith("artifacts/"))
    assert gw.client.get(url).status_code == 200
    base, _, query = url.partition("?")
    prefix = base[: base.index("/artifacts/")]
    with Unchanged(gw):
        for index, path in enumerate(
            ["../../etc/passwd", "/etc/passwd", "artifacts/t1/%2e%2e%2f%2e%2e%2fx", "artifacts//x", "a\\b"]
        ):
            body = {"items": [{"path": "summary.csv"}] * index + [{"path": path}]}
            response = gw.cli("POST", f"/benchmark-runs/{run_id}/outputs/download-urls", json=body)
            refused(response, 400, f"items.{index}.path")
        for tail in (
            "artifacts%2F..%2F..%2F..%2Fetc%2Fpasswd",
            "artifacts/../../../etc/passwd".replace("..", "%2e%2e"),
            "summary.csv%00.txt",
            "/etc/passwd",
            "artifacts//t1",
        ):
            refused(gw.client.get(f"{prefix}/{tail}?{query}"), 400, "path")


# --- NUL, invalid Unicode, malformed bodies, wrong content types -------------------------------------------


def test_nul_and_lone_surrogates_in_bodies_are_refused_naming_the_field(gateway: Gateway) -> None:
    gw = gateway
    gw.benchmark("demo", ["t1"])
    with Unchanged(gw):
        cases: list[tuple[str, str, bytes, str]] = [
            ("v1", "/tokens", b'{"name": "lap\\u0000top"}', "name"),
            ("v1", "/tokens", b'{"name": "\\ud800"}', "name"),
            ("v1", "/benchmarks", b'{"source_type": "folder", "path": "/srv/x", "name": "a\\u0000"}', "name"),
            ("v1", "/workspaces", b'{"name": "ws", "x\\u0000": 1}', "x\\x00"),
            ("cli", "/benchmark-runs", json.dumps(demo_config(env_config={"A": "b\u0000"})).encode(),
             "env_config.A"),
            ("cli", "/benchmark-runs", json.dumps(demo_config(secrets={"provided": {"K": "\0"}})).encode(),
             "secrets.provided.K"),
            ("v1", "/webhooks", b'{"url": "http://x/\\u0000"}', "url"),
        ]  # fmt: skip
        for api, path, raw, field in cases:
            send = gw.v1 if api == "v1" else gw.cli
            response = send("POST", path, content=raw, headers={"Content-Type": "application/json"})
            refused(response, 400, field)
        toml = b'[experiment]\nbenchmark = "de\\u0000mo"\n'
        response = gw.v1("POST", "/runs", content=toml, headers={"Content-Type": "application/toml"})
        refused(response, 400, "experiment.benchmark")
        deep = b"[" * 100_000 + b"]" * 100_000
        refused(
            gw.v1("POST", "/tokens", content=deep, headers={"Content-Type": "application/json"}),
            400,
            "(body)",
        )
        nested: Any = "leaf"
        for _ in range(100):
            nested = {"n": nested}
        response = gw.v1("POST", "/tokens", json={"name": "t", "n": nested})
        assert refused(response, 400, "n" + ".n" * 63)["code"] == "VALIDATION"


def test_malformed_bodies_and_wrong_content_types_are_refused(gateway: Gateway) -> None:
    gw = gateway
    gw.benchmark("demo", ["t1"])
    json_type = {"Content-Type": "application/json"}
    with Unchanged(gw):
        for path in ("/benchmarks", "/tokens", "/secrets", "/workspaces", "/webhooks", "/runs"):
            refused(gw.v1("POST", path, content=b"{not json", headers=json_type), 400, "(body)")
            refused(gw.v1("POST", path, content=b"\xff\xfe{}", headers=json_type), 400, "(body)")
        refused(gw.v1("PUT", "/workspace/budget", content=b"[1, 2", headers=json_type), 400, "(body)")
        refused(gw.v1("POST", "/benchmarks", content=b"[1, 2]", headers=json_type), 400, "(body)")
        for path in ("/benchmark-runs", "/environment-secrets"):
            refused(gw.cli("POST", path, content=b"{not json"), 400, "(body)")
            refused(gw.cli("POST", path, content=b'"a string"'), 400, "(body)")
        refused(gw.cli("DELETE", "/environment-secrets", content=b"{"), 400, "(body)")
        bad_toml = b"[experiment\nbenchmark = "
        response = gw.v1("POST", "/runs", content=bad_toml, headers={"Content-Type": "application/toml"})
        refused(response, 400, "(toml)")

        body = json.dumps({"name": "X", "value": "v", "scope": "user"}).encode()
        for send, path, content_type in [
            (gw.v1, "/secrets", "text/plain"),
            (gw.v1, "/benchmarks", "application/x-www-form-urlencoded"),
            (gw.v1, "/tokens", "multipart/form-data; boundary=xyz"),
            (gw.v1, "/runs", "application/xml"),
            (gw.cli, "/benchmark-runs", "application/toml"),  # TOML is read by /api/v1/runs only
            (gw.cli, "/environment-secrets", "text/html"),
        ]:
            response = send("POST", path, content=body, headers={"Content-Type": content_type})
            assert refused(response, 415, "Content-Type")["code"] == "UNSUPPORTED_MEDIA_TYPE"
    # The accepted spellings still work.
    secret = {"name": "FINE", "value": "v", "scope": "user"}
    for content_type in ("application/json; charset=utf-8", "application/vnd.regatta+json"):
        response = gw.v1(
            "POST", "/secrets", content=json.dumps(secret).encode(), headers={"Content-Type": content_type}
        )
        gw.ok(response, 201)
