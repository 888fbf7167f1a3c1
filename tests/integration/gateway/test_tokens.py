"""API tokens (shown once, stored hashed, revocable, expiring) and workspace/member administration."""

from __future__ import annotations

import time

from .conftest import ADMIN_TOKEN, Gateway
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


def test_401_codes_and_bad_token_requests(pg_gateway: Gateway) -> None:
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
    before = gw.event_count()
    for body, field in [
        ({"expires_at": "2000-01-01T00:00:00Z"}, "expires_at"),
        ({"expires_at": "tomorrow"}, "expires_at"),
        ({"expires_at": "2999-01-01T00:00:00"}, "expires_at"),
        ({"expires_in_seconds": 0}, "expires_in_seconds"),
        ({"name": ""}, "name"),
    ]:
        assert flat_error(gw.v1("POST", "/tokens", json=body), 400)["field"] == field
    assert gw.event_count() == before


def test_others_cannot_revoke_a_token(pg_gateway: Gateway) -> None:
    gw = pg_gateway
    member = gw.member("default", "member@example.com")
    mine = gw.ok(gw.v1("POST", "/tokens", json={"name": "admin's"}), 201)
    flat_error(gw.v1("DELETE", f"/tokens/{mine['id']}", token=member), 404, "NOT_FOUND")
    assert gw.cli("GET", "/benchmarks", token=mine["token"]).status_code == 200


def test_admins_create_workspaces_and_add_members(pg_gateway: Gateway) -> None:
    gw = pg_gateway
    created = gw.ok(gw.v1("POST", "/workspaces", json={"name": "research"}), 201)
    assert created["role"] == "admin"
    flat_error(gw.v1("POST", "/workspaces", json={"name": "Research"}), 409, "CONFLICT")
    flat_error(gw.v1("POST", "/workspaces", json={"name": " "}), 400)
    member = gw.member("research", "carol@example.com")
    assert gw.ok(gw.cli("GET", "/benchmarks", token=member, workspace="research"))["total_count"] == 0
    flat_error(
        gw.cli("GET", "/benchmarks", token=member, workspace="default"),
        404,
        "WORKSPACE_SCOPE_HEADER_ACCESS_DENIED",
    )
    flat_error(gw.v1("POST", "/workspaces", json={"name": "carols"}, token=member), 403, "FORBIDDEN")
    body = {"email": "dave@example.com"}
    flat_error(gw.v1("POST", "/workspaces/research/members", json=body, token=member), 403, "FORBIDDEN")
    flat_error(gw.v1("POST", "/workspaces/default/members", json=body, token=member), 404)
    flat_error(gw.v1("POST", "/workspaces/research/members", json={"email": "x", "role": "member"}), 400)
    flat_error(gw.v1("POST", "/workspaces/research/members", json={"email": "x@y.z", "role": "owner"}), 400)
    again = gw.ok(
        gw.v1("POST", "/workspaces/default/members", json={"email": "CAROL@example.com", "role": "admin"}),
        201,
    )
    assert (
        again["user_id"]
        == gw.ok(gw.client.get("/api/cli/verify", headers={"Authorization": f"Bearer {member}"}))["user"][
            "id"
        ]
    )
    assert gw.ok(gw.cli("GET", "/benchmarks", token=member, workspace="default"))["total_count"] == 0
    whoami = gw.ok(gw.client.get("/api/cli/verify", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}))
    assert whoami["user"]["email"] == "admin@localhost"
