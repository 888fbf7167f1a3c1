"""Issue 19 item 1 at the gateway: a benchmark added by `name[@version]` alone resolves against the default
registry (REGATTA_DEFAULT_REGISTRY, here a local file or a local HTTP server), `org/name[@ref]` against the
hub; the registry's datasets can be browsed and searched. The registry is read as hostile input: a huge,
stalling, redirecting or malformed one is refused with a reason, and nothing is recorded.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from regatta_gateway.app import create_app
from regatta_shared.security.outbound import NOT_ALLOWED

from .conftest import Gateway, make_settings
from .test_hostile_input import Unchanged, refused

DATASETS = [
    {
        "name": "terminal-bench",
        "version": "2.0",
        "description": "Terminal tasks, second edition",
        "tasks": [{"name": f"t{i}", "path": f"tasks/t{i}"} for i in range(3)],
    },
    {
        "name": "terminal-bench",
        "version": "1.0",
        "description": "Terminal tasks, first edition",
        "tasks": [{"name": "t0", "path": "tasks/t0"}],
    },
    {"name": "swe-lite", "version": "head", "description": "Small software fixes", "tasks": []},
    {"name": "hello-world", "version": "1.0", "description": "One tiny task", "tasks": [{"name": "h"}]},
    # Malformed rows are skipped (and counted), never shown or resolved.
    {"name": "no-version", "description": "x", "tasks": []},
    {"name": "evil\u0000name", "version": "1", "description": "x", "tasks": []},
    {"name": "at@sign", "version": "1", "description": "x", "tasks": []},
    {"name": "long-desc", "version": "1", "description": "d" * 5000, "tasks": "not a list"},
    "not an object",
]


def write_registry(path: Path, rows: Any = DATASETS) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows))
    return path


@pytest.fixture
def open_gateway(postgres_url: str, nats_url: str, tmp_path: Path) -> Iterator[Callable[..., Gateway]]:
    """A gateway (on Postgres) whose settings name a default registry and any other overrides."""
    clients: list[TestClient] = []

    def open_(registry: str, **overrides: Any) -> Gateway:
        settings = make_settings(postgres_url, nats_url, tmp_path / f"data{len(clients)}").model_copy(
            update={"default_registry": registry, **overrides}
        )
        client = TestClient(create_app(settings))
        client.__enter__()
        clients.append(client)
        return Gateway(client, settings)

    yield open_
    for client in clients:
        client.__exit__(None, None, None)


def added_sources(gw: Gateway) -> dict[str, dict[str, Any]]:
    return {
        e.data["benchmark_id"]: e.data["source"]
        for e in gw.store.read_all(0, 100_000)
        if e.type == "BenchmarkAdded"
    }


def test_datasets_of_the_default_registry_are_listed_and_searched(open_gateway, tmp_path: Path) -> None:
    registry = write_registry(tmp_path / "reg" / "registry.json")
    gw = open_gateway(str(registry))

    listed = gw.ok(gw.v1("GET", "/registry/datasets"))
    assert listed["registry"] == str(registry)
    assert listed["total"] == 4 and listed["skipped"] == 5
    assert [(d["dataset"], d["task_count"]) for d in listed["datasets"]] == [
        ("hello-world@1.0", 1),
        ("swe-lite@head", 0),
        ("terminal-bench@2.0", 3),  # the newer version first
        ("terminal-bench@1.0", 1),
    ]
    assert listed["datasets"][2] == {
        "name": "terminal-bench",
        "version": "2.0",
        "dataset": "terminal-bench@2.0",
        "description": "Terminal tasks, second edition",
        "task_count": 3,
    }
    # Every word must match, in the name or the description, whatever the case.
    found = gw.ok(gw.v1("GET", "/registry/datasets", params={"q": "TERMINAL first"}))
    assert [d["dataset"] for d in found["datasets"]] == ["terminal-bench@1.0"]
    assert gw.ok(gw.v1("GET", "/registry/datasets", params={"q": "software"}))["total"] == 1
    assert gw.ok(gw.v1("GET", "/registry/datasets", params={"q": "nothing-like-it"}))["datasets"] == []
    paged = gw.ok(gw.v1("GET", "/registry/datasets", params={"limit": 2, "offset": 1}))
    assert paged["total"] == 4 and [d["name"] for d in paged["datasets"]] == ["swe-lite", "terminal-bench"]
    refused(gw.v1("GET", "/registry/datasets", params={"q": "x" * 201}), 400, "q")
    assert gw.v1("GET", "/registry/datasets", token="rg_not-a-token").status_code == 401


def test_a_bare_name_resolves_against_the_default_registry(open_gateway, tmp_path: Path) -> None:
    registry = write_registry(tmp_path / "reg" / "registry.json")
    gw = open_gateway(str(registry))
    member = gw.member("default", "member@example.com")

    latest = gw.ok(gw.v1("POST", "/benchmarks", json={"dataset": "terminal-bench"}), 201)["id"]
    pinned = gw.ok(gw.v1("POST", "/benchmarks", json={"dataset": "terminal-bench@1.0", "name": "tb-1"}), 201)[
        "id"
    ]
    # A plain member may add from the deployment's registry file although it is outside the source roots.
    body = {"source_type": "registry", "dataset": "hello-world"}
    by_member = gw.ok(gw.v1("POST", "/benchmarks", json=body, token=member), 201)["id"]
    hub = gw.ok(gw.v1("POST", "/benchmarks", json={"dataset": "acme/mini@v1"}), 201)["id"]

    sources = added_sources(gw)
    assert sources[latest] | {"metadata": None} == {
        "type": "registry",
        "ref": "terminal-bench",
        "registry_path": str(registry),
        "registry_url": None,
        "dataset": "terminal-bench",
        "version": None,  # registry-sync picks it as Harbor does (head, else the highest)
        "git_url": None,
        "git_ref": None,
        "subdir": None,
        "metadata": None,
        "trusted": True,
    }
    assert (sources[pinned]["dataset"], sources[pinned]["version"]) == ("terminal-bench", "1.0")
    assert sources[by_member]["registry_path"] == str(registry) and sources[by_member]["trusted"] is True
    assert sources[hub]["type"] == "hub" and sources[hub]["registry_path"] is None
    assert (sources[hub]["dataset"], sources[hub]["version"]) == ("acme/mini", "v1")
    gw.settle()
    names = {b["name"] for b in gw.ok(gw.v1("GET", "/benchmarks"))["benchmarks"]}
    assert {"terminal-bench", "tb-1", "hello-world", "acme/mini"} <= names


def test_an_unknown_name_or_version_is_refused_with_the_close_names(open_gateway, tmp_path: Path) -> None:
    gw = open_gateway(str(write_registry(tmp_path / "registry.json")))
    with Unchanged(gw):
        body = refused(gw.v1("POST", "/benchmarks", json={"dataset": "terminal-bnch@2.0"}), 400, "dataset")
        assert body["message"] == (
            "dataset 'terminal-bnch' is not in the default registry; close names: terminal-bench"
        )
        assert body["suggestions"] == ["terminal-bench"]
        # Case and substrings count too; a skipped (malformed) row is not a name.
        body = refused(gw.v1("POST", "/benchmarks", json={"dataset": "Hello"}), 400, "dataset")
        assert body["suggestions"] == ["hello-world"]
        body = refused(gw.v1("POST", "/benchmarks", json={"dataset": "no-version"}), 400, "dataset")
        assert "close names" not in body["message"] and "GET /api/v1/registry/datasets" in body["message"]
        body = refused(gw.v1("POST", "/benchmarks", json={"dataset": "terminal-bench@9.9"}), 400, "dataset")
        assert body["message"] == (
            "dataset 'terminal-bench' has no version '9.9' in the default registry (available: 2.0, 1.0)"
        )
        assert body["suggestions"] == ["terminal-bench@2.0", "terminal-bench@1.0"]
        for dataset in ("@1.0", "x" * 301, "bad\u0001name"):
            refused(gw.v1("POST", "/benchmarks", json={"dataset": dataset}), 400, "dataset")


def test_without_a_default_registry_a_registry_must_be_named(open_gateway) -> None:
    gw = open_gateway("")
    assert gw.ok(gw.v1("GET", "/registry/datasets")) == {
        "registry": None,
        "total": 0,
        "skipped": 0,
        "datasets": [],
    }
    with Unchanged(gw):
        body = refused(gw.v1("POST", "/benchmarks", json={"dataset": "terminal-bench"}), 400, "registry_path")
        assert "no default registry is configured" in body["message"]
    # A hub dataset needs no registry.
    gw.ok(gw.v1("POST", "/benchmarks", json={"dataset": "acme/mini"}), 201)


# --- an unreachable or hostile registry --------------------------------------------------------------------


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Registry(BaseHTTPRequestHandler):
    """A registry server whose answer each test picks: rows, an endless body, a stall, a trickle or a
    redirect."""

    mode = "rows"
    redirect_to = ""
    served = 0

    def do_GET(self) -> None:
        Registry.served += 1
        if self.mode == "redirect":
            self.send_response(302)
            self.send_header("Location", self.redirect_to)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        try:
            if self.mode == "rows":
                self.wfile.write(json.dumps(DATASETS).encode())
            elif self.mode == "endless":
                chunk = b" " * (1024 * 1024)
                for _ in range(64):  # 64 MiB of whitespace, twice the cap
                    self.wfile.write(chunk)
            elif self.mode == "stall":
                self.wfile.write(b"[")
                self.wfile.flush()
                time.sleep(5)
            elif self.mode == "trickle":  # never silent for a whole read timeout, never done
                self.wfile.write(b"[")
                for _ in range(25):
                    self.wfile.flush()
                    time.sleep(0.2)
                    self.wfile.write(b" ")
            elif self.mode == "object":
                self.wfile.write(b'{"datasets": []}')
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def registry_server() -> Iterator[str]:
    Registry.mode, Registry.served = "rows", 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), Registry)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_registry_url_is_read_through_the_outbound_guard(open_gateway, registry_server: str) -> None:
    port = registry_server.rsplit(":", 1)[1]
    url = f"{registry_server}/registry.json"
    # Loopback without an allow-list entry: refused before any connection.
    guarded = open_gateway(url)
    body = guarded.v1("GET", "/registry/datasets")
    assert body.status_code == 503 and body.json()["code"] == "REGISTRY_UNAVAILABLE"
    assert body.json()["message"] == (
        f"The default registry cannot be reached: registry {url}: {NOT_ALLOWED}"
    )
    assert Registry.served == 0

    gw = open_gateway(url, outbound_allow=f"127.0.0.1:{port}")
    assert gw.ok(gw.v1("GET", "/registry/datasets"))["total"] == 4
    member = gw.member("default", "member@example.com")
    added = gw.ok(gw.v1("POST", "/benchmarks", json={"dataset": "swe-lite"}, token=member), 201)["id"]
    source = added_sources(gw)[added]
    # Unlike the operator's own file, a remote registry's JSON is not trusted with host paths.
    assert source["registry_url"] == url and source["registry_path"] is None and source["trusted"] is False
    assert Registry.served == 1, "the list is cached between the browse and the add"

    # A redirect to an address the allow-list does not name is refused like a direct one.
    Registry.mode, Registry.redirect_to = "redirect", "http://127.0.0.2:80/registry.json"
    redirected = open_gateway(url, outbound_allow=f"127.0.0.1:{port}")
    message = redirected.v1("GET", "/registry/datasets").json()["message"]
    assert message.endswith(NOT_ALLOWED), message


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("endless", "answer larger than 32 MiB (REGATTA_FETCH_MAX_MB)"),
        ("stall", "timed out"),
        ("trickle", "answer not complete within 1 s (REGATTA_FETCH_TIMEOUT_SEC)"),
        ("object", "expected a JSON array of datasets"),
    ],
)
def test_a_hostile_registry_is_refused_with_its_reason(
    open_gateway, registry_server: str, mode: str, reason: str
) -> None:
    # A short answer time keeps the stalling case quick; the size cap is the default one.
    Registry.mode = mode
    url = f"{registry_server}/registry.json"
    gw = open_gateway(url, outbound_allow=registry_server.removeprefix("http://"), fetch_timeout_sec=1.0)
    started = time.monotonic()
    with Unchanged(gw):
        browse = gw.v1("GET", "/registry/datasets")
        assert browse.status_code == 503, browse.text
        assert browse.json()["message"] == f"The default registry cannot be reached: registry {url}: {reason}"
        add = gw.v1("POST", "/benchmarks", json={"dataset": "swe-lite"})
        assert add.status_code == 503 and add.json()["code"] == "REGISTRY_UNAVAILABLE"
        assert "name a registry_url or registry_path, or a hub dataset" in add.json()["message"]
    assert time.monotonic() - started < 10
    # The failure is remembered for a while: the add did not fetch the registry again.
    assert Registry.served == 1


def test_an_unreachable_registry_is_said_so_and_a_named_registry_still_works(
    open_gateway, tmp_path: Path
) -> None:
    port = closed_port()
    url = f"http://127.0.0.1:{port}/registry.json"
    gw = open_gateway(url, outbound_allow=f"127.0.0.1:{port}")
    body = gw.v1("GET", "/registry/datasets").json()
    assert body == {
        "error": f"The default registry cannot be reached: registry {url}: unreachable",
        "message": f"The default registry cannot be reached: registry {url}: unreachable",
        "code": "REGISTRY_UNAVAILABLE",
        "registry": url,
    }
    file = write_registry(tmp_path / "mine" / "registry.json")
    gw.ok(gw.v1("POST", "/benchmarks", json={"registry_path": str(file), "dataset": "swe-lite"}), 201)
    # A missing file is said so too.
    missing = open_gateway(str(tmp_path / "nowhere" / "registry.json"))
    assert missing.v1("GET", "/registry/datasets").json()["message"].endswith(": file not found")


def test_the_dataset_list_is_read_again_after_its_time(open_gateway, tmp_path: Path) -> None:
    registry = write_registry(tmp_path / "registry.json")
    cached = open_gateway(str(registry))
    fresh = open_gateway(str(registry), default_registry_cache_seconds=0)
    assert cached.ok(cached.v1("GET", "/registry/datasets"))["total"] == 4
    write_registry(registry, DATASETS[:1])
    assert cached.ok(cached.v1("GET", "/registry/datasets"))["total"] == 4
    assert fresh.ok(fresh.v1("GET", "/registry/datasets"))["total"] == 1
