"""Workspace isolation and roles on every route the app serves, enumerated from the app itself (issue 21).

REST (/api/v1, /api/cli), both live streams, webhooks and their deliveries, the audit log and the web pages:
a route added later is checked without editing this test. A route whose path names a resource is asked for
another workspace's resource (by every key it accepts) and must answer 404; a route without one must not
show anything of the other workspace, and must refuse a workspace the caller is not in. A plain member is
refused (403, nothing recorded) on every admin route; every route that changes something is classified as
admin-only or open to members, so a new one fails here until someone decides which it is.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.routing import iter_route_contexts
from fastapi.testclient import TestClient
from regatta_gateway.app import create_app
from regatta_gateway.queries.downloads import DOWNLOAD_PREFIX

from .conftest import ADMIN_TOKEN, Gateway, demo_config, make_settings
from .test_cli_contract import flat_error

PLACEHOLDER = re.compile(r"\{(\w+)(?::\w+)?\}")
UNSAFE = ("POST", "PUT", "PATCH", "DELETE")
# Routes outside the check, each for a reason that holds whatever the workspace.
NOT_WORKSPACE_ROUTES = {
    ("GET", DOWNLOAD_PREFIX + "/{run_id}/{path:path}"): "a signed URL: the signature is the permission",
    ("GET", "/"): "a redirect to /benchmarks",
    ("GET", "/settings"): "a redirect to /settings/workspace",
    ("GET", "/signin"): "the sign-in form",
    ("POST", "/signin"): "signs in with a token: no workspace yet",
    ("POST", "/signout"): "clears the session cookies",
    ("GET", "/health"): "liveness, no data",
}
NOT_WORKSPACE_PREFIXES = ("/openapi.json", "/asyncapi.json", "/docs", "/redoc", "/static")
# Reads about the caller, not a workspace: they answer whatever workspace is named (and show nothing of it).
USER_LEVEL_READS = {"/api/cli/verify"}
# Platform-wide reads for platform administrators only: any other caller gets 403, whatever workspace.
PLATFORM_ADMIN_READS = {"/api/v1/platform/admins"}
# Commands for platform administrators only, refused to anyone else before any lookup (the same 403 for
# every key the route matches): the caller here is not one.
PLATFORM_ADMIN_COMMANDS = {("POST", "/api/v1/benchmarks/{key}/rescore")}
# Routes naming their resources in the query string: asked with the other workspace's runs, they answer 404.
QUERY_KEYED: dict[tuple[str, str], Callable[[str], dict[str, str]]] = {
    ("GET", "/api/v1/compare"): lambda run: {"a": f"{run}:0", "b": f"{run}:1"},
    ("GET", "/compare"): lambda run: {"a": f"{run}:0", "b": f"{run}:1"},
    ("GET", "/compare.csv"): lambda run: {"a": f"{run}:0", "b": f"{run}:1"},
    ("GET", "/compare/task"): lambda run: {"a": f"{run}:0", "b": f"{run}:1", "task": "t1"},
}
CATCH_ALL = "/api/cli/{rest:path}"  # answers 404 for unknown CLI paths; nothing to isolate
# Bodies that get a route past validation to its lookup, so a 404 there is the lookup's answer.
BODIES: dict[tuple[str, str], dict[str, Any]] = {
    ("POST", "/api/cli/benchmark-runs/{key}/outputs/download-urls"): {"items": [{"path": "summary.csv"}]},
    ("POST", "/api/v1/workspaces/{key}/members"): {"email": "x@example.com", "role": "member"},
    ("PATCH", "/api/v1/workspaces/{key}/members/{user_id}"): {"role": "member"},
    ("POST", "/api/v1/benchmarks/{key}/exclusions"): {"task": "t1", "reason": "broken"},
}

# Who may change what. Admin-only routes answer 403 to a member; the rest are open to members (each
# still scoped to the member's workspace and, for secrets and tokens, to their own user).
ADMIN_ONLY = {
    ("POST", "/api/v1/workspaces"),
    ("POST", "/api/v1/workspaces/{key}/members"),
    ("PUT", "/api/v1/workspace/budget"),
    ("POST", "/api/v1/webhooks"),
    ("DELETE", "/api/v1/webhooks/{webhook_id}"),
    ("POST", "/api/v1/platform/admins"),
    ("PATCH", "/api/v1/workspaces/{key}"),
    ("DELETE", "/api/v1/workspaces/{key}"),
    ("PATCH", "/api/v1/workspaces/{key}/members/{user_id}"),
    ("POST", "/api/v1/benchmarks/{key}/rescore"),  # platform administrators only
    ("POST", "/api/v1/benchmarks/{key}/exclusions"),  # exclude a broken task from a version
}
ADMIN_BODIES: dict[tuple[str, str], dict[str, Any]] = {
    ("POST", "/api/v1/workspaces"): {"name": "member-made"},
    ("POST", "/api/v1/workspaces/{key}/members"): {"email": "x@example.com", "role": "admin"},
    ("PUT", "/api/v1/workspace/budget"): {"budget_usd": 1000},
    ("POST", "/api/v1/webhooks"): {"url": "http://127.0.0.1:9/member", "kinds": ["run.finished"]},
    ("POST", "/api/v1/platform/admins"): {"email": "admin@localhost"},
    ("PATCH", "/api/v1/workspaces/{key}"): {"name": "member-named"},
    ("PATCH", "/api/v1/workspaces/{key}/members/{user_id}"): {"role": "admin"},
    ("POST", "/api/v1/benchmarks/{key}/exclusions"): {"task": "t1", "reason": "broken"},
}
# Workspace-wide secrets are admin-only on routes members may otherwise use for their own secrets.
ADMIN_ONLY_WORKSPACE_SECRETS = [
    ("POST", "/api/v1/secrets", {"json": {"name": "SHARED", "value": "v", "scope": "workspace"}}),
    ("DELETE", "/api/v1/secrets", {"params": {"name": "SECRET_OWN", "scope": "workspace"}}),
    (
        "POST",
        "/api/cli/environment-secrets",
        {"json": {"name": "SHARED", "value": "v", "scope": "workspace"}},
    ),
    ("DELETE", "/api/cli/environment-secrets", {"json": {"name": "SECRET_OWN", "scope": "workspace"}}),
]
MEMBER_WRITES = {
    ("POST", "/api/v1/benchmarks"): "add a benchmark to the workspace",
    ("POST", "/api/v1/benchmarks/uploads"): "upload tasks as a scratch benchmark of the workspace",
    ("POST", "/api/v1/benchmarks/{key}/sync"): "re-sync a benchmark",
    ("DELETE", "/api/v1/benchmarks/{key}"): "remove a benchmark (runs keep their locked version)",
    ("POST", "/api/v1/runs"): "submit a run",
    ("POST", "/api/v1/runs/{key}/stop"): "stop a run",
    ("POST", "/api/v1/runs/{key}/attempts/{attempt_id}/labels"): "label an attempt",
    ("DELETE", "/api/v1/runs/{key}/attempts/{attempt_id}/labels/{label_id}"): "take a label off an attempt",
    ("POST", "/api/v1/runs/preview"): "count what a submission would schedule (records nothing)",
    ("POST", "/api/v1/runs/{key}/rerun-errored"): "re-run a finished run's errored attempts",
    ("POST", "/api/v1/tokens"): "issue one's own token",
    ("DELETE", "/api/v1/tokens/{token_id}"): "revoke one's own token",
    ("POST", "/api/v1/secrets"): "one's own secrets (workspace scope: admins, checked below)",
    ("DELETE", "/api/v1/secrets"): "one's own secrets (workspace scope: admins, checked below)",
    ("POST", "/api/cli/benchmark-runs"): "submit a run",
    ("POST", "/api/cli/benchmark-runs/{key}/stop"): "stop a run",
    ("POST", "/api/cli/benchmark-runs/{key}/outputs/download-urls"): "download a run's outputs",
    ("POST", "/api/cli/environment-secrets"): "one's own secrets (workspace scope: admins, checked below)",
    ("DELETE", "/api/cli/environment-secrets"): "one's own secrets (workspace scope: admins, checked below)",
    ("POST", "/workspace"): "switch the web UI to another of one's workspaces",
    ("DELETE", "/api/v1/workspaces/{key}/members/{user_id}"): (
        "leave the workspace (removing someone else: admins, test_workspace_admin.py)"
    ),
}


@dataclass
class Other:
    """Everything workspace `beta` holds, as another workspace's user could try to name it."""

    workspace_id: str
    benchmark_keys: list[str]
    run_keys: list[str]
    token_id: str
    webhook_id: str
    member_id: str  # bob, a member of beta only
    attempt_id: str  # an attempt of beta's run, labelled (its page, its live stream, its labels)
    label_id: str
    leaks: list[str]  # strings that must never appear in a response to the other workspace


@pytest.fixture
def hook_gateway(postgres_url: str, nats_url: str, tmp_path: Path) -> Iterator[Gateway]:
    """The gateway on Postgres, with webhooks allowed to 127.0.0.1:9 only (nothing listens there), so
    webhooks can be made without any delivery leaving this machine."""
    settings = make_settings(postgres_url, nats_url, tmp_path / "data")
    settings = settings.model_copy(update={"outbound_allow": "127.0.0.1:9"})
    with TestClient(create_app(settings)) as client:
        yield Gateway(client, settings)


def routes(app: Any) -> list[tuple[str, str]]:
    found = set()
    for route in iter_route_contexts(app.routes):
        path = route.path or ""
        if path.startswith(NOT_WORKSPACE_PREFIXES) or path == CATCH_ALL:
            continue
        found |= {
            (m, path) for m in route.methods or () if m != "HEAD" and (m, path) not in NOT_WORKSPACE_ROUTES
        }
    return sorted(found)


def keys_for(method: str, template: str, other: Other) -> list[str]:
    """Concrete paths naming the other workspace's resource, by every kind of key the route takes."""
    names = PLACEHOLDER.findall(template)
    if names == ["key", "user_id"] and "/workspaces/" in template:
        # The other workspace's member, in it (by id and by name) and in the caller's own workspace.
        member = quote(other.member_id, safe="")
        return [
            template.replace("{key}", quote(workspace, safe="")).replace("{user_id}", member)
            for workspace in (other.workspace_id, "beta", "default")
        ]
    if names[:2] in (["key", "attempt_id"], ["run_key", "attempt_id"]):
        # The other workspace's attempt (and its label), under its run by every key of the run.
        attempt = quote(other.attempt_id, safe="")
        return [
            template.replace(f"{{{names[0]}}}", quote(run, safe=""))
            .replace("{attempt_id}", attempt)
            .replace("{label_id}", other.label_id)
            for run in other.run_keys
        ]
    if names == ["key", "name"] and "/tasks/" in template:
        # The other workspace's task (t1), under its benchmark by every key of the benchmark.
        return [
            template.replace("{key}", quote(bench, safe="")).replace("{name:path}", "t1")
            for bench in other.benchmark_keys
        ]
    assert len(names) == 1, f"{method} {template}: classify its path parameters in keys_for"
    name = names[0]
    if name == "key" and "/workspaces/" in template:
        values = [other.workspace_id, "beta"]
    elif name == "run_key" or (name == "key" and "runs" in template):
        values = other.run_keys
    elif name == "key":
        values = other.benchmark_keys
    elif name == "token_id":
        values = [other.token_id]
    elif name == "webhook_id":
        values = [other.webhook_id]
    else:
        raise AssertionError(f"{method} {template}: a new kind of path parameter {name!r}; classify it")
    return [PLACEHOLDER.sub(quote(value, safe=""), template) for value in values]


def seed_beta(gw: Gateway, bob: str) -> Other:
    benchmark_id = gw.benchmark("bench-beta", ["t1"], workspace="beta", token=bob)
    run = gw.submit(demo_config("bench-beta"), workspace="beta", token=bob)
    gw.progress(run["id"], artifacts={"agent/trajectory.json": b"{}"})
    attempt = gw.ok(gw.v1("GET", f"/runs/{run['id']}/attempts", workspace="beta", token=bob))["attempts"][0]
    labelled = gw.ok(
        gw.v1(
            "POST",
            f"/runs/{run['id']}/attempts/{attempt['attempt_id']}/labels",
            json={"label": "beta label", "note": "note-beta-only"},
            workspace="beta",
            token=bob,
        ),
        201,
    )
    for scope in ("user", "workspace"):
        body = {"name": "SECRET_BETA", "value": "value-beta", "scope": scope}
        gw.ok(gw.v1("POST", "/secrets", json=body, workspace="beta", token=bob), 201)
    token = gw.ok(gw.v1("POST", "/tokens", json={"name": "beta"}, token=bob, workspace="beta"), 201)
    hook_url = "http://127.0.0.1:9/beta-only"
    hook = gw.ok(gw.v1("POST", "/webhooks", json={"url": hook_url}, token=bob, workspace="beta"), 201)
    workspace_id = next(
        w["id"] for w in gw.ok(gw.v1("GET", "/workspaces", token=bob))["workspaces"] if w["name"] == "beta"
    )
    gw.settle()
    return Other(
        workspace_id=workspace_id,
        benchmark_keys=[benchmark_id, "/srv/benchmarks/bench-beta", "bench-beta"],
        run_keys=[run["id"], run["name"]],
        token_id=token["id"],
        webhook_id=hook["id"],
        attempt_id=attempt["attempt_id"],
        label_id=labelled["id"],
        member_id=gw.ok(gw.client.get("/api/cli/verify", headers={"Authorization": f"Bearer {bob}"}))["user"][
            "id"
        ],
        leaks=[
            benchmark_id,
            run["id"],
            "SECRET_BETA",
            token["id"],
            hook["id"],
            hook_url,
            workspace_id,
            labelled["id"],
            "note-beta-only",
        ],
    )


def request(gw: Gateway, method: str, path: str, token: str, workspace: str | None, **kwargs: Any) -> Any:
    """As the caller's client would send it: the CLI's headers on /api/cli, the sign-in cookie on pages."""
    if path.startswith("/api/cli/"):
        return gw.cli(method, path.removeprefix("/api/cli"), token=token, workspace=workspace, **kwargs)
    if path.startswith("/api/v1/"):
        return gw.v1(method, path.removeprefix("/api/v1"), token=token, workspace=workspace, **kwargs)
    cookies = {"regatta_token": token, **({"regatta_workspace": workspace} if workspace else {})}
    gw.client.cookies.clear()
    try:
        return gw.client.request(
            method, path, cookies=cookies, headers={"x-regatta-ui": "1"}, follow_redirects=False, **kwargs
        )
    finally:
        gw.client.cookies.clear()


def test_no_route_shows_or_touches_another_workspaces_resources(hook_gateway: Gateway) -> None:
    gw = hook_gateway
    # An admin of her own workspace, so admin-only routes reach their lookup instead of stopping at the role.
    alice = gw.member("default", "alice@a.example", role="admin")
    gw.workspace("beta")
    bob = gw.member("beta", "bob@b.example", role="admin")
    gw.benchmark("bench-own", ["t1"])
    other = seed_beta(gw, bob)
    all_routes = routes(gw.client.app)
    assert ("GET", "/api/v1/runs/{key}/stream") in all_routes and (
        "GET",
        "/benchmarks/runs/{run_key}",
    ) in all_routes
    assert ("GET", "/api/v1/runs/{key}/attempts/{attempt_id}/live") in all_routes
    assert ("GET", "/benchmarks/runs/{run_key}/attempts/{attempt_id}") in all_routes
    before = gw.event_count()
    checked = 0
    for method, template in all_routes:
        body = BODIES.get((method, template), {})
        kwargs = (
            {"json": body}
            if method in UNSAFE and not template.startswith(("/workspace", "/benchmarks"))
            else {}
        )
        if PLACEHOLDER.search(template):
            for path in keys_for(method, template, other):
                own = request(gw, method, path, alice, "default", **kwargs)
                # A key no route matches (a source path) is the router's 404, before any command.
                expected = {403, 404} if (method, template) in PLATFORM_ADMIN_COMMANDS else {404}
                assert own.status_code in expected, (method, path, own.status_code, own.text[:300])
                if path.startswith("/api/cli/"):
                    flat_error(own, 404, "NOT_FOUND")
                if path.startswith("/api/"):
                    # Naming the other workspace does not help: the caller is not in it.
                    foreign = request(gw, method, path, alice, other.workspace_id, **kwargs)
                    assert foreign.status_code == 404, (method, path, foreign.text[:300])
                checked += 1
        elif (method, template) in QUERY_KEYED:
            for run_key in other.run_keys:
                params = QUERY_KEYED[(method, template)](run_key)
                own = request(gw, method, template, alice, "default", params=params)
                assert own.status_code == 404, (template, run_key, own.status_code, own.text[:300])
                leaked = [value for value in other.leaks if value in own.text and value != run_key]
                assert not leaked, (template, leaked)
                if template.startswith("/api/"):
                    foreign = request(gw, method, template, alice, other.workspace_id, params=params)
                    assert foreign.status_code == 404, (template, foreign.text[:300])
                checked += 1
        elif template == "/workspace":
            switched = request(gw, "POST", "/workspace", alice, None, data={"workspace": other.workspace_id})
            assert switched.status_code == 404, switched.text[:300]
            checked += 1
        elif method == "GET":
            for workspace in ("default", other.workspace_id):
                # Pages fall back to the caller's own workspace for a workspace cookie that is not theirs;
                # the API refuses a workspace header that is not theirs.
                response = request(gw, method, template, alice, workspace)
                if template in PLATFORM_ADMIN_READS or (
                    template.startswith("/api/")
                    and workspace != "default"
                    and template not in USER_LEVEL_READS
                ):
                    assert response.status_code in (403, 404), (template, response.status_code)
                else:
                    assert response.status_code == 200, (template, response.status_code, response.text[:300])
                leaked = [value for value in other.leaks if value in response.text]
                assert not leaked, (template, workspace, leaked)
            checked += 1
        else:
            # A change aimed at the other workspace by naming it.
            foreign = request(gw, method, template, alice, other.workspace_id, json={})
            assert foreign.status_code in (403, 404), (method, template, foreign.text[:300])
            checked += 1
    assert checked >= 60, checked
    assert gw.event_count() == before, "a refused request changed nothing"


def test_members_are_refused_on_every_admin_route(hook_gateway: Gateway) -> None:
    gw = hook_gateway
    member = gw.member("default", "member@example.com")
    gw.workspace("beta")
    bob = gw.member("beta", "bob@b.example", role="admin")
    seed_beta(gw, bob)
    own_hook = gw.ok(gw.v1("POST", "/webhooks", json={"url": "http://127.0.0.1:9/own"}), 201)
    gw.ok(gw.v1("POST", "/secrets", json={"name": "SECRET_OWN", "value": "v", "scope": "workspace"}), 201)
    gw.settle()

    writes = {(m, t) for m, t in routes(gw.client.app) if m in UNSAFE}
    unclassified = writes - ADMIN_ONLY - set(MEMBER_WRITES)
    assert not unclassified, f"classify these routes as ADMIN_ONLY or MEMBER_WRITES: {sorted(unclassified)}"
    assert not ADMIN_ONLY & set(MEMBER_WRITES)

    before = gw.event_count()
    for method, template in sorted(ADMIN_ONLY):
        path = PLACEHOLDER.sub(lambda m: "default" if m.group(1) == "key" else own_hook["id"], template)
        response = request(gw, method, path, member, "default", json=ADMIN_BODIES.get((method, template), {}))
        assert response.status_code == 403, (method, path, response.status_code, response.text[:300])
    for method, path, kwargs in ADMIN_ONLY_WORKSPACE_SECRETS:
        response = request(gw, method, path, member, "default", **kwargs)
        assert response.status_code == 403, (method, path, response.status_code, response.text[:300])
    assert gw.event_count() == before, "a refused request changed nothing"
    # The same requests from an admin go through, so the 403s above were the role's doing.
    hooks = gw.ok(gw.v1("GET", "/webhooks", token=ADMIN_TOKEN))
    assert any(h["id"] == own_hook["id"] for h in hooks["webhooks"])
    assert gw.v1("PUT", "/workspace/budget", json={"budget_usd": 1000}).status_code == 200
