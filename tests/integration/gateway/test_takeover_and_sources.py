"""Issue 16, findings 1, 3 and 7 (webhooks), attacked through the gateway as a hostile user would:
a workspace admin minting a token for someone else, a plain member naming host paths and internal URLs
as sources, webhooks aimed at internal addresses. Each is refused naming the field and changes nothing."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from regatta_gateway.notifications.delivery import MAX_ATTEMPTS, WebhookDelivery
from regatta_gateway.notifications.notices import Notice
from regatta_gateway.readmodels import tables as t
from regatta_shared.security.outbound import OutboundPolicy
from sqlalchemy import select

from .conftest import ADMIN_TOKEN, Gateway
from .test_hostile_input import Unchanged, refused

# Nothing was fetched: the refusal says the address is not allowed and which setting would allow it.
REFUSED_URL = "url: address not allowed unless REGATTA_OUTBOUND_ALLOW names it"


def tokens_of(gw: Gateway, email: str) -> list[dict[str, Any]]:
    with gw.store.read_engine.connect() as conn:
        return [
            dict(r)
            for r in conn.execute(
                select(t.tokens)
                .join(t.users, t.users.c.id == t.tokens.c.user_id)
                .where(t.users.c.email == email)
            ).mappings()
        ]


def event_types(gw: Gateway) -> list[str]:
    return [e.type for e in gw.store.read_all(0, 100_000)]


@pytest.fixture
def listening_port() -> Iterator[int]:
    """An open port on 127.0.0.1 (a listener that never answers), to compare with a closed one."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# --- finding 1: account takeover --------------------------------------------------------------------


def test_a_workspace_admin_cannot_mint_a_token_for_an_existing_user(pg_gateway: Gateway) -> None:
    gw = pg_gateway
    gw.workspace("beta")
    bob = gw.member("beta", "bob@b.example", role="admin")  # admin of beta only
    victim_tokens = tokens_of(gw, "admin@localhost")
    types_before = event_types(gw)

    with Unchanged(gw):
        for body in (
            {"email": "admin@localhost", "issue_token": True},
            {"email": "ADMIN@localhost", "role": "admin", "issue_token": True},
            {"email": "newcomer@b.example", "issue_token": True},
        ):
            response = gw.v1("POST", "/workspaces/beta/members", json=body, token=bob)
            body = refused(response, 403, "issue_token")
            assert "platform administrators" in body["message"] and "token" not in response.json()

    assert tokens_of(gw, "admin@localhost") == victim_tokens
    assert event_types(gw).count("ApiTokenCreated") == types_before.count("ApiTokenCreated")
    # Adding the user without a token still works and yields no credential for them.
    added = gw.ok(
        gw.v1("POST", "/workspaces/beta/members", json={"email": "admin@localhost"}, token=bob), 201
    )
    assert "token" not in added and tokens_of(gw, "admin@localhost") == victim_tokens
    # Bob may issue tokens to himself only.
    own = gw.ok(gw.v1("POST", "/tokens", json={"name": "mine"}, token=bob), 201)
    assert gw.ok(gw.v1("GET", "/tokens", token=own["token"]))["tokens"]
    assert tokens_of(gw, "admin@localhost") == victim_tokens


def test_platform_administrators_are_granted_by_a_platform_administrator_only(pg_gateway: Gateway) -> None:
    gw = pg_gateway
    gw.workspace("beta")
    bob = gw.member("beta", "bob@b.example", role="admin")
    carol = gw.member("beta", "carol@b.example")

    with Unchanged(gw):
        assert (
            gw.v1("POST", "/platform/admins", json={"email": "bob@b.example"}, token=bob).status_code == 403
        )
        assert gw.v1("GET", "/platform/admins", token=bob).status_code == 403
    admins = gw.ok(gw.v1("GET", "/platform/admins"))["admins"]
    assert [a["email"] for a in admins] == ["admin@localhost"]

    gw.ok(gw.v1("POST", "/platform/admins", json={"email": "bob@b.example"}), 201)
    gw.settle()
    assert [a["email"] for a in gw.ok(gw.v1("GET", "/platform/admins", token=bob))["admins"]] == [
        "admin@localhost",
        "bob@b.example",
    ]
    # Now bob may issue a token to another user: a platform administrator's act.
    body = {"email": "carol@b.example", "issue_token": True}
    issued = gw.ok(gw.v1("POST", "/workspaces/beta/members", json=body, token=bob), 201)
    assert issued["token"] != carol and gw.ok(gw.v1("GET", "/tokens", token=issued["token"]))
    refused(gw.v1("POST", "/platform/admins", json={"email": "nobody@x.example"}), 404, "email")


# --- finding 3: host paths and internal URLs as sources ---------------------------------------------

HOST_PATHS = [
    ({"source_type": "folder", "path": "/etc"}, "path"),
    ({"source_type": "folder", "path": "/srv/benchmarks-other/x"}, "path"),
    ({"source_type": "registry", "registry_path": "/root/registry.json", "dataset": "x@1"}, "registry_path"),
    ({"source_type": "git", "repo": "/home/someone/repo"}, "repo"),
    ({"source_type": "git", "repo": "file:///root/secrets-repo"}, "repo"),
]


def test_a_plain_member_cannot_name_host_paths_outside_the_source_roots(pg_gateway: Gateway) -> None:
    gw = pg_gateway
    gw.workspace("beta")
    member = gw.member("beta", "mallory@b.example")

    with Unchanged(gw):
        for body, field in HOST_PATHS:
            response = gw.v1(
                "POST", "/benchmarks", json={"name": "x", **body}, token=member, workspace="beta"
            )
            message = refused(response, 403, field)["message"]
            # The setting and its value: where a member's host paths may be.
            assert "REGATTA_SOURCE_ROOTS=/srv/benchmarks;" in message, body

    inside = {"source_type": "folder", "path": "/srv/benchmarks/demo", "name": "ok"}
    gw.ok(gw.v1("POST", "/benchmarks", json=inside, token=member, workspace="beta"), 201)
    # A platform administrator may name any host path; the source records that it was trusted.
    admin_id = gw.ok(
        gw.v1("POST", "/benchmarks", json={"name": "etc", "source_type": "folder", "path": "/etc"}), 201
    )["id"]
    added = [e for e in gw.store.read_all(0, 100_000) if e.type == "BenchmarkAdded"]
    trusted = {e.data["benchmark_id"]: e.data["source"]["trusted"] for e in added}
    assert trusted[admin_id] is True and list(trusted.values()).count(True) == 1


def test_internal_registry_urls_are_refused_alike_for_open_and_closed_ports(
    pg_gateway: Gateway, listening_port: int
) -> None:
    gw = pg_gateway
    gw.workspace("beta")
    member = gw.member("beta", "mallory@b.example")
    urls = [
        f"http://127.0.0.1:{listening_port}/registry.json",
        f"http://127.0.0.1:{closed_port()}/registry.json",
        "http://169.254.169.254/latest/meta-data/registry.json",
        "http://10.20.30.40/registry.json",
        "http://[::1]:8080/registry.json",
        "http://[::ffff:127.0.0.1]/registry.json",
        "http://0.0.0.0/registry.json",
        "http://localhost/registry.json",
    ]
    messages = set()
    with Unchanged(gw):
        for url in urls:
            for token in (member, ADMIN_TOKEN):  # the allow-list, not the role, opens internal addresses
                body = {"name": "x", "registry_url": url, "dataset": "d@1"}
                response = gw.v1(
                    "POST",
                    "/benchmarks",
                    json=body,
                    token=token,
                    workspace="beta" if token == member else None,
                )
                messages.add(refused(response, 400, "registry_url")["message"])
        for repo in (
            f"https://127.0.0.1:{listening_port}/x.git",
            "ssh://git@10.0.0.1/x.git",
            "git@127.0.0.1:x.git",
        ):
            refused(gw.v1("POST", "/benchmarks", json={"name": "x", "repo": repo}), 400, "repo")
        for repo in ("git://example.com/x.git", "http://example.com/x.git", "ext::sh -c touch% /tmp/x"):
            refused(gw.v1("POST", "/benchmarks", json={"name": "x", "repo": repo}), 400, "repo")
    assert messages == {
        "could not fetch registry_url: address not allowed unless REGATTA_OUTBOUND_ALLOW names it"
    }


# --- finding 7 (webhooks): internal targets ----------------------------------------------------------


def test_webhooks_to_internal_addresses_are_refused(pg_gateway: Gateway, listening_port: int) -> None:
    gw = pg_gateway
    with Unchanged(gw):
        for url in (
            f"http://127.0.0.1:{listening_port}/hook",
            f"http://127.0.0.1:{closed_port()}/hook",
            "http://169.254.169.254/latest/meta-data/",
            "http://192.168.1.1/hook",
            "http://[fd00::1]/hook",
        ):
            body = refused(gw.v1("POST", "/webhooks", json={"url": url}), 400, "url")
            assert body["message"] == REFUSED_URL
    assert gw.ok(gw.v1("GET", "/webhooks"))["webhooks"] == []


# Internal IPv4 addresses written in the IPv6 forms that carry them, and site-local space (issue 37).
IPV6_FORMS = [
    "::7f00:1",
    "64:ff9b::a9fe:a9fe",
    "64:ff9b::a00:1",
    "64:ff9b:1::a00:1",
    "2002:7f00:1::1",
    "::ffff:0:7f00:1",
    "2001:0:808:808::80ff:fffe",
    "fec0::1",
]


def test_webhooks_and_registries_at_internal_ipv4_in_ipv6_forms_are_refused(pg_gateway: Gateway) -> None:
    gw = pg_gateway
    with Unchanged(gw):
        for address in IPV6_FORMS:
            body = refused(gw.v1("POST", "/webhooks", json={"url": f"http://[{address}]:9/hook"}), 400, "url")
            assert "address not allowed" in body["message"], body
            assert "REGATTA_OUTBOUND_ALLOW" in body["message"], body
            source = {"name": "x", "registry_url": f"http://[{address}]/registry.json", "dataset": "d@1"}
            body = refused(gw.v1("POST", "/benchmarks", json=source), 400, "registry_url")
            assert "REGATTA_OUTBOUND_ALLOW" in body["message"], body
    assert gw.ok(gw.v1("GET", "/webhooks"))["webhooks"] == []


class Receiver:
    """A webhook target on 127.0.0.1 answering 500 with a body that must never reach the delivery log."""

    def __init__(self) -> None:
        self.hits = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                receiver.hits += 1
                self.rfile.read(int(self.headers["Content-Length"]))
                reply = b"internal-service-secret-7f3a"
                self.send_response(500)
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *_: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_webhook_delivery_checks_the_target_again_and_logs_status_codes_only(pg_gateway: Gateway) -> None:
    """At delivery the target is checked again (its name may now answer an internal address): not
    allow-listed, it is never contacted; allow-listed, its answer's body stays out of the log."""
    gw = pg_gateway
    receiver = Receiver()
    notice = Notice("ntf_1", "run.finished", "ws_x", {"id": "ntf_1", "kind": "run.finished"})
    try:
        for hook_id, allow in (("wh_blocked", ""), ("wh_allowed", "127.0.0.1")):
            delivery = WebhookDelivery(gw.store, b"k" * 32, OutboundPolicy.parse(allow), base_delay=0.001)
            hook = {"id": hook_id, "workspace_id": "ws_x", "url": receiver.url}
            asyncio.run(delivery.deliver(hook, notice))
            asyncio.run(delivery.http.aclose())
            if hook_id == "wh_blocked":
                assert receiver.hits == 0, "a target that is not allowed was contacted"
        logged = {
            hook: [(e.data["status_code"], e.data["error"]) for e in gw.store.read_stream(f"webhook-{hook}")]
            for hook in ("wh_blocked", "wh_allowed")
        }
    finally:
        receiver.close()
    assert logged["wh_blocked"] == [(None, REFUSED_URL)] * MAX_ATTEMPTS
    assert logged["wh_allowed"] == [(500, "HTTP 500")] * MAX_ATTEMPTS and receiver.hits == MAX_ATTEMPTS
    assert "internal-service-secret" not in gw.all_event_json()


def test_a_receiver_answering_an_endless_body_costs_the_gateway_nothing(pg_gateway: Gateway) -> None:
    """Issue 37: the webhook sender read a receiver's whole reply. A receiver that answers 200 and then
    an endless body is logged delivered at once, with no byte of that body read into memory."""
    sent = [0]

    class Endless(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.end_headers()
            chunk = b"x" * 65536
            try:
                while sent[0] < 8 * 1024**3:  # 8 GiB: far past anything a reader could hold
                    self.wfile.write(chunk)
                    sent[0] += len(chunk)
            except OSError:
                pass  # the sender hung up, as it should

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Endless)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    notice = Notice("ntf_2", "run.finished", "ws_x", {"id": "ntf_2", "kind": "run.finished"})
    try:
        delivery = WebhookDelivery(pg_gateway.store, b"k" * 32, OutboundPolicy.parse("127.0.0.1"))
        hook = {
            "id": "wh_endless",
            "workspace_id": "ws_x",
            "url": f"http://127.0.0.1:{server.server_address[1]}/",
        }
        started = time.monotonic()
        asyncio.run(delivery.deliver(hook, notice))
        asyncio.run(delivery.http.aclose())
        took = time.monotonic() - started
    finally:
        server.shutdown()
        server.server_close()
    logged = [
        (e.data["status_code"], e.data["error"]) for e in pg_gateway.store.read_stream("webhook-wh_endless")
    ]
    assert logged == [(200, None)], logged
    assert took < 10 and sent[0] < 512 * 1024**2, (took, sent[0])
