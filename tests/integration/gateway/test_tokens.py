"""API tokens (shown once, stored hashed, revocable, expiring) and workspace/member administration."""

from __future__ import annotations

import time

from regatta_gateway.authentication import authenticate
from regatta_gateway.commands import identity, workspace_handlers
from regatta_gateway.errors import Conflict, Forbidden, Invalid, NotFound
from regatta_gateway.queries.benchmarks import list_benchmarks

from .conftest import ADMIN_TOKEN, Gateway
from .service_support import Services, refused
from .test_cli_contract import flat_error


def test_token_is_shown_once_stored_hashed_and_revocable(pg_gateway: Gateway) -> None:
    gw = pg_gateway
    created = gw.ok(gw.v1("POST", "/tokens", json={"name": "laptop"}), 201)
    token = created["token"]
    assert token.startswith("rg_") and created["name"] == "laptop" and "expires_at" not in created
    assert token not in gw.all_event_json()
    listed = gw.ok(gw.v1("GET", "/tokens"))["tokens"]
    assert created["id"] in [t["id"] for t in listed] and token not in str(listed)
    assert all("token_hash" not in t for t in listed)
    assert gw.ok(gw.cli("GET", "/benchmarks", token=token))["total_count"] == 0
    revoked = gw.v1("DELETE", f"/tokens/{created['id']}")
    assert revoked.status_code == 204
    assert gw.v1("DELETE", f"/tokens/{created['id']}").status_code == 204
    flat_error(gw.cli("GET", "/benchmarks", token=token), 401, "TOKEN_REVOKED")
    flat_error(gw.v1("GET", "/benchmarks", token=token), 401, "TOKEN_REVOKED")
    flat_error(
        gw.client.get("/api/cli/verify", headers={"Authorization": f"Bearer {token}"}), 401, "TOKEN_REVOKED"
    )


def test_expired_tokens_get_token_expired(pg_gateway: Gateway) -> None:
    gw = pg_gateway
    # Lifetime long enough that the first request lands before expiry on a loaded machine.
    created = gw.ok(gw.v1("POST", "/tokens", json={"name": "short", "expires_in_seconds": 4}), 201)
    assert gw.cli("GET", "/benchmarks", token=created["token"]).status_code == 200
    deadline = time.monotonic() + 15
    while gw.cli("GET", "/benchmarks", token=created["token"]).status_code == 200:
        assert time.monotonic() < deadline, "the token never expired"
        time.sleep(0.2)
    flat_error(gw.cli("GET", "/benchmarks", token=created["token"]), 401, "TOKEN_EXPIRED")
    flat_error(gw.v1("GET", "/runs", token=created["token"]), 401, "TOKEN_EXPIRED")


def test_401_codes(pg_gateway: Gateway) -> None:
    gw = pg_gateway
    flat_error(
        gw.client.get("/api/cli/benchmarks", headers={"X-Osmosis-Workspace": "default"}),
        401,
        "AUTH_HEADER_MISSING",
    )
    flat_error(
        gw.client.get("/api/v1/benchmarks", headers={"Authorization": "Basic abc"}),
        401,
        "AUTH_HEADER_MISSING",
    )
    flat_error(gw.cli("GET", "/benchmarks", token="rg_unknown"), 401, "TOKEN_INVALID")


def test_bad_token_requests_name_the_field_and_record_nothing(pg_services: Services) -> None:
    sv = pg_services
    before = sv.event_count()
    for body, field in [
        ({"expires_at": "2000-01-01T00:00:00Z"}, "expires_at"),
        ({"expires_at": "tomorrow"}, "expires_at"),
        ({"expires_at": "2999-01-01T00:00:00"}, "expires_at"),
        ({"expires_in_seconds": 0}, "expires_in_seconds"),
        ({"name": ""}, "name"),
    ]:
        assert (
            refused(lambda body=body: identity.create_token(sv.store, sv.scope(), body), Invalid).field
            == field
        )
    assert sv.event_count() == before


def test_others_cannot_revoke_a_token(pg_services: Services) -> None:
    sv = pg_services
    member = sv.member("default", "member@example.com")
    mine = identity.create_token(sv.store, sv.scope(), {"name": "admin's"})
    sv.settle()
    as_member = sv.scope(member)
    refused(lambda: identity.revoke_token(sv.store, as_member, mine["id"]), NotFound, "NOT_FOUND")
    sv.settle()
    assert sv.user_id(mine["token"]) == sv.user_id(ADMIN_TOKEN)  # the token still authenticates


def test_admins_create_workspaces_and_add_members(pg_services: Services) -> None:
    sv = pg_services
    admin = sv.scope()
    created = workspace_handlers.create_workspace(sv.store, sv.settings, admin, {"name": "research"})
    sv.settle()
    assert created["role"] == "admin"
    refused(lambda: sv.workspace("Research"), Conflict, "CONFLICT")
    refused(lambda: sv.workspace(" "), Invalid)
    member = sv.member("research", "carol@example.com")
    as_member = sv.scope(member, "research")
    assert list_benchmarks(sv.store, as_member, 50, 0)["total_count"] == 0
    refused(lambda: sv.scope(member, "default"), NotFound, "WORKSPACE_SCOPE_HEADER_ACCESS_DENIED")
    create = workspace_handlers.create_workspace
    refused(lambda: create(sv.store, sv.settings, as_member, {"name": "carols"}), Forbidden, "FORBIDDEN")
    body = {"email": "dave@example.com"}
    refused(lambda: identity.add_member(sv.store, as_member, body), Forbidden, "FORBIDDEN")
    refused(lambda: sv.scope(member, "default"), NotFound)  # nor can they add to a workspace not theirs
    research = sv.scope(workspace="research")
    refused(lambda: identity.add_member(sv.store, research, {"email": "x", "role": "member"}), Invalid)
    refused(lambda: identity.add_member(sv.store, research, {"email": "x@y.z", "role": "owner"}), Invalid)
    again = identity.add_member(sv.store, admin, {"email": "CAROL@example.com", "role": "admin"})
    sv.settle()
    assert again["user_id"] == sv.user_id(member)
    assert list_benchmarks(sv.store, sv.scope(member, "default"), 50, 0)["total_count"] == 0
    assert authenticate(sv.store, f"Bearer {ADMIN_TOKEN}").email == "admin@localhost"
