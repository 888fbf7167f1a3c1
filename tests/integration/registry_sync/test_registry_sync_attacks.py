"""Issue 16, findings 2 and 3, where the fetch happens: a registry's JSON is the attacker's, so its git
values are checked for their kind before git sees them, its host paths obey the source roots, and every
fetch obeys the outbound guard. Each attack ends the sync `failed` with a clear reason and runs nothing."""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from regatta_shared.events import BenchmarkSource

from ..registry_sync_support import (
    SyncHarness,
    commit_all,
    folder_source,
    init_repo,
    registry_source,
    self_signed_certificate,
    sync_harness,
    write_task,
)

REFUSED_REGISTRY_URL = (
    "could not fetch registry_url: address not allowed unless REGATTA_OUTBOUND_ALLOW names it"
)


@pytest.fixture
async def harness(tmp_path: Path, nats_url: str) -> AsyncIterator[SyncHarness]:
    async with sync_harness(f"sqlite:///{tmp_path / 'events.db'}", nats_url) as h:
        yield h


class Served:
    """An HTTP server on 127.0.0.1 answering fixed bodies by path (a path mapped to an int redirects
    there), counting the requests it got."""

    def __init__(self, routes: dict[str, bytes | str]) -> None:
        self.routes = routes
        self.hits: list[str] = []
        served = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                served.hits.append(self.path)
                body = served.routes.get(self.path)
                if isinstance(body, str):
                    self.send_response(302)
                    self.send_header("Location", body)
                    self.end_headers()
                    return
                self.send_response(200 if body is not None else 404)
                payload = body or b"internal secret page"
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Served:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "roots" / "repo"
    init_repo(repo)
    write_task(repo / "tasks" / "alpha", 1)
    return repo, commit_all(repo, "first")


def url_registry(tasks: list[dict[str, object]]) -> bytes:
    return json.dumps([{"name": "evil", "version": "1.0", "description": "", "tasks": tasks}]).encode()


def url_source(url: str) -> BenchmarkSource:
    return BenchmarkSource(type="registry", ref="evil@1.0", registry_url=url, dataset="evil", version="1.0")


@pytest.fixture
def marker() -> Iterator[Path]:
    path = Path(f"/tmp/regatta-pwned-{uuid.uuid4().hex}")
    yield path
    path.unlink(missing_ok=True)


async def test_a_registry_task_whose_commit_id_is_an_option_runs_nothing(
    harness: SyncHarness,
    repo: tuple[Path, str],
    tmp_path: Path,
    marker: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The issue's attack: a registry served on 127.0.0.1 (allow-listed), a task with a file:// git_url
    (under the roots, so the path is not what refuses it) and `--upload-pack=<command>` as its commit."""
    path, commit = repo
    monkeypatch.setenv("REGATTA_SOURCE_ROOTS", str(tmp_path / "roots"))
    command = f"sh -c 'touch {marker}'"
    attacks = [
        ({"git_url": f"file://{path}", "git_commit_id": f"--upload-pack={command}"}, "git_commit_id"),
        ({"git_url": f"--upload-pack={command}", "git_commit_id": commit}, "git_url"),
        ({"git_url": f"ext::{command}", "git_commit_id": commit}, "git_url"),
        (
            {"git_url": f"file://{path}", "git_commit_id": "main; touch x", "path": "tasks/alpha"},
            "git_commit_id",
        ),
        ({"git_url": f"file://{path}", "git_commit_id": commit, "path": "--output=/tmp/x"}, "path"),
        ({"git_url": f"file://{path}", "git_commit_id": commit, "path": "../../etc"}, "path"),
        ({"git_url": "git://127.0.0.1:9418/repo", "git_commit_id": commit}, "git_url"),
    ]
    for index, (task, field) in enumerate(attacks):
        routes: dict[str, bytes | str] = {
            "/registry.json": url_registry([{"name": "alpha", "path": "tasks/alpha", **task}])
        }
        with Served(routes) as served:
            monkeypatch.setenv("REGATTA_OUTBOUND_ALLOW", f"127.0.0.1:{served.port}")
            benchmark_id = harness.add(
                url_source(served.url("/registry.json")), f"evil-{index}", trusted=False
            )
            body = await harness.first_sync(benchmark_id)

        assert body["sync_status"] == "failed", (task, body)
        assert f"task 'alpha'.{field} must" in body["sync_error"], (task, body["sync_error"])
        assert body["task_count"] in (None, 0) and not harness.events(benchmark_id, "BenchmarkTasksSynced")
        assert not marker.exists(), "the command in the registry ran"

    # The same registry with a commit id of the right kind syncs: the checks refuse only the attack.
    good = {"name": "alpha", "path": "tasks/alpha", "git_url": f"file://{path}", "git_commit_id": commit}
    with Served({"/registry.json": url_registry([good])}) as served:
        monkeypatch.setenv("REGATTA_OUTBOUND_ALLOW", f"127.0.0.1:{served.port}")
        ready = await harness.first_sync(harness.add(url_source(served.url("/registry.json")), trusted=False))
    assert ready["sync_status"] == "ready", ready.get("sync_error")


async def test_host_paths_outside_the_roots_are_refused_where_they_are_read(
    harness: SyncHarness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A source that reached the log untrusted (or a registry naming a local repository) reads nothing
    outside REGATTA_SOURCE_ROOTS: the gateway's check is not the only one."""
    outside = tmp_path / "outside"
    write_task(outside / "tasks" / "secret", 7)
    (outside / "registry.json").write_text(
        url_registry([{"name": "secret", "path": "tasks/secret"}]).decode()
    )
    monkeypatch.setenv("REGATTA_SOURCE_ROOTS", str(tmp_path / "roots"))
    sources = [
        (folder_source(outside / "tasks"), "path"),
        (registry_source(outside / "registry.json", "evil@1.0"), "registry_path"),
        (BenchmarkSource(type="git", ref=str(outside), git_url=str(outside)), "git_url"),
    ]
    for source, field in sources:
        body = await harness.first_sync(harness.add(source, trusted=False))
        assert body["sync_status"] == "failed"
        assert body["sync_error"] == f"{field} names a host path outside REGATTA_SOURCE_ROOTS"

    # A registry under the roots whose task paths walk out of its folder, or whose git tasks name a
    # local repository outside the roots.
    inside = tmp_path / "roots" / "reg"
    inside.mkdir(parents=True)
    (inside / "registry.json").write_text(
        url_registry([{"name": "secret", "path": "../../outside/tasks/secret"}]).decode()
    )
    body = await harness.first_sync(
        harness.add(registry_source(inside / "registry.json", "evil@1.0"), trusted=False)
    )
    assert body["sync_status"] == "failed" and "path leaves the registry's folder" in body["sync_error"]
    init_repo(outside / "repo")
    write_task(outside / "repo" / "tasks" / "secret", 8)
    other = commit_all(outside / "repo", "x")
    task = {
        "name": "secret",
        "path": "tasks/secret",
        "git_url": f"file://{outside / 'repo'}",
        "git_commit_id": other,
    }
    (inside / "registry.json").write_text(url_registry([task]).decode())
    body = await harness.first_sync(
        harness.add(registry_source(inside / "registry.json", "evil@1.0"), trusted=False)
    )
    assert (
        body["sync_status"] == "failed"
        and "names a host path outside REGATTA_SOURCE_ROOTS" in body["sync_error"]
    )


async def test_internal_registry_urls_fail_alike_for_open_and_closed_ports(
    harness: SyncHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("REGATTA_OUTBOUND_ALLOW", raising=False)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    with Served({"/registry.json": url_registry([])}) as served:
        urls = [
            served.url("/registry.json"),
            f"http://127.0.0.1:{closed}/registry.json",
            "http://169.254.169.254/latest/meta-data/",
            "http://10.1.2.3/registry.json",
            "http://[::1]/registry.json",
        ]
        errors = set()
        for url in urls:
            body = await harness.first_sync(harness.add(url_source(url), trusted=False))
            assert body["sync_status"] == "failed"
            errors.add(body["sync_error"])
        assert served.hits == [], "the internal server was reached"
    assert errors == {REFUSED_REGISTRY_URL}


async def test_a_redirect_to_an_internal_address_is_refused_and_nothing_is_echoed(
    harness: SyncHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the registry's own port is allow-listed: its redirect to another internal service (the
    metadata endpoint stand-in) is refused, and a failing answer's body never reaches the error."""
    with Served({"/metadata": b"internal secret page"}) as internal, Served({}) as registry:
        registry.routes["/registry.json"] = internal.url("/metadata")
        monkeypatch.setenv("REGATTA_OUTBOUND_ALLOW", f"127.0.0.1:{registry.port}")
        body = await harness.first_sync(
            harness.add(url_source(registry.url("/registry.json")), trusted=False)
        )
        assert body["sync_status"] == "failed"
        assert body["sync_error"] == REFUSED_REGISTRY_URL
        assert internal.hits == [] and registry.hits == ["/registry.json"]

        missing = await harness.first_sync(
            harness.add(url_source(registry.url("/nothing.json")), trusted=False)
        )
        assert missing["sync_error"] == "could not fetch registry_url: HTTP 404"
        assert "secret" not in missing["sync_error"]


class _AsksForPassword(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="git"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


async def test_a_repository_runs_none_of_the_hosts_git_programs(
    harness: SyncHarness, repo: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host's git configuration names a hooks folder and a credential helper (programs that run
    with the service's rights): neither runs for a repository a user named, whether git checks it out
    (a post-checkout hook) or the remote asks for a password (the helper would hand it the host's)."""
    path, _commit = repo
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    ran = tmp_path / "ran"
    (hooks / "post-checkout").write_text(f"#!/bin/sh\necho hook >> {ran}\n")
    (hooks / "post-checkout").chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text(
        f"[core]\n\thooksPath = {hooks}\n[credential]\n\thelper = !echo helper >> {ran} && :\n"
    )
    monkeypatch.setenv("HOME", str(home))
    # The counter-check: with this configuration a plain checkout does run the hook (git's environment
    # as this process had it before a sync pinned its own settings there).
    plain = {k: v for k, v in os.environ.items() if not k.startswith("GIT_CONFIG_")}
    subprocess.run(["git", "clone", "-q", str(path), str(tmp_path / "plain")], check=True, env=plain)
    assert ran.read_text() == "hook\n"
    ran.unlink()

    body = await harness.first_sync(
        harness.add(BenchmarkSource(type="git", ref=str(path), git_url=str(path)))
    )
    assert body["sync_status"] == "ready", body.get("sync_error")

    cert, key = self_signed_certificate(tmp_path / "certs")
    monkeypatch.setenv("GIT_SSL_CAINFO", str(cert))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _AsksForPassword)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        monkeypatch.setenv("REGATTA_OUTBOUND_ALLOW", f"127.0.0.1:{port}")
        url = f"https://127.0.0.1:{port}/private.git"
        locked = await harness.first_sync(harness.add(BenchmarkSource(type="git", ref=url, git_url=url)))
    finally:
        server.shutdown()
        server.server_close()
    assert locked["sync_status"] == "failed"
    assert not ran.exists(), ran.read_text()
