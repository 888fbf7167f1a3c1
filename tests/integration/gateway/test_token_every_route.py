"""Issue 8 item 5: a revoked or an expired token gets 401 on every route of /api/v1 and /api/cli.

Routes are enumerated from the app itself, so a route added later is covered without editing this test.
Signed download URLs are the one exception (the signature is the permission, by design); the test
asserts that they are the only unauthenticated route under /api/.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi.routing import iter_route_contexts
from regatta_gateway.authentication import authenticate, resolve_scope
from regatta_gateway.commands import identity
from regatta_gateway.queries.downloads import DOWNLOAD_PREFIX

from .conftest import ADMIN_TOKEN, Gateway, demo_config
from .test_cli_contract import flat_error

AUTHENTICATED_PREFIXES = ("/api/v1/", "/api/cli/")
UNAUTHENTICATED_BY_DESIGN = {("GET", DOWNLOAD_PREFIX + "/{run_id}/{path:path}")}
PLACEHOLDER = re.compile(r"\{(\w+)(?::\w+)?\}")


def api_routes(app: Any) -> list[tuple[str, str]]:
    """(method, path template) of every route the app serves under /api/."""
    found = set()
    for route in iter_route_contexts(app.routes):
        path = route.path or ""
        if path.startswith("/api/"):
            found |= {(method, path) for method in route.methods or ()}
    return sorted(found)


def concrete(path: str, ids: dict[str, str]) -> str:
    """Real ids where the route takes one, so a route that forgot to authenticate would answer 2xx."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name == "key":
            return ids["run"] if "runs" in path else ids["benchmark"]
        return ids.get(name, "anything/at/all" if name == "rest" else f"some-{name}")

    return PLACEHOLDER.sub(value, path)


def test_revoked_and_expired_tokens_get_401_on_every_api_route(pg_gateway: Gateway) -> None:
    gw = pg_gateway
    # Two bad tokens on every route are ~100 failed authentications from one client on purpose: past
    # the failure throttle (test_auth_hardening.py), which would answer 429 instead of the 401s checked.
    gw.client.app.state.auth_throttle.burst = 1_000_000  # type: ignore[attr-defined]
    benchmark_id = gw.benchmark("demo", ["t1"])
    run_id = gw.submit(demo_config())["id"]
    gw.progress(run_id, finish=False)
    admin = resolve_scope(gw.store, authenticate(gw.store, f"Bearer {ADMIN_TOKEN}"), "default")
    revoked = gw.ok(gw.v1("POST", "/tokens", json={"name": "to revoke"}), 201)
    assert gw.v1("DELETE", f"/tokens/{revoked['id']}").status_code == 204
    # Issued already expired (the API refuses past expiries), as a token looks once its time is up.
    expired = identity.issue_token(
        gw.store,
        admin.principal.user_id,
        "expired",
        "2000-01-01T00:00:00Z",
        actor=admin.principal.user_id,
        workspace_id=admin.workspace_id,
    )
    gw.settle()
    ids = {"run": run_id, "benchmark": benchmark_id, "token_id": revoked["id"]}

    routes = api_routes(gw.client.app)
    open_routes = {r for r in routes if not r[1].startswith(AUTHENTICATED_PREFIXES)}
    assert open_routes == UNAUTHENTICATED_BY_DESIGN
    protected = [r for r in routes if r not in open_routes]
    assert len(protected) >= 45, protected
    assert ("GET", "/api/cli/{rest:path}") in protected  # even the catch-all answers 401 first

    before = gw.event_count()
    for token, code in ((revoked["token"], "TOKEN_REVOKED"), (expired["token"], "TOKEN_EXPIRED")):
        for method, template in protected:
            response = gw.client.request(
                method,
                concrete(template, ids),
                headers={
                    "Authorization": f"Bearer {token}",
                    "X-Osmosis-Workspace": "default",
                    "X-Regatta-Workspace": "default",
                    "Content-Type": "application/json",
                },
                content=b"{}" if method in ("POST", "PUT", "PATCH", "DELETE") else None,
            )
            body = flat_error(response, 401, code)
            assert "token" not in body or body["token"] != token, (method, template)
    assert gw.event_count() == before, "a refused request changed nothing"

    # The same reads with a valid token do reach their routes, so the 401s above were the tokens' doing.
    for method, template in protected:
        if method == "GET" and not template.endswith("/stream"):
            response = gw.client.request(
                method,
                concrete(template, ids),
                headers={"Authorization": f"Bearer {ADMIN_TOKEN}", "X-Osmosis-Workspace": "default"},
            )
            assert response.status_code != 401, (template, response.text)
