"""Workspace isolation: a user of workspace A gets 404 for every resource of workspace B, on both APIs."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from .conftest import ADMIN_TOKEN, Gateway, demo_config
from .test_cli_contract import flat_error


@dataclass
class Resources:
    workspace: str
    token: str
    benchmark_id: str
    benchmark_ref: str
    run_id: str
    run_name: str
    secret: str
    token_id: str
    benchmark_name: str


def seed(gw: Gateway, workspace: str, token: str, label: str) -> Resources:
    """A benchmark, a finished run with an artifact, personal and workspace secrets, and a token."""
    benchmark_id = gw.benchmark(f"bench-{label}", ["t1"], workspace=workspace, token=token)
    run = gw.submit(demo_config(f"bench-{label}"), workspace=workspace, token=token)
    gw.progress(run["id"], artifacts={"agent/trajectory.json": b"{}"})
    secret = f"SECRET_{label.upper()}"
    for scope, writer in (("user", token), ("workspace", ADMIN_TOKEN)):
        body = {"name": secret, "value": f"value-{label}", "scope": scope}
        gw.ok(gw.cli("POST", "/environment-secrets", json=body, workspace=workspace, token=writer))
    own = gw.ok(gw.v1("POST", "/tokens", json={"name": label}, token=token, workspace=workspace), 201)
    return Resources(
        workspace,
        token,
        benchmark_id,
        f"/srv/benchmarks/bench-{label}",
        run["id"],
        run["name"],
        secret,
        own["id"],
        f"bench-{label}",
    )


def e(value: str) -> str:
    return quote(value, safe="")


def cli_routes(other: Resources) -> list[tuple[str, str, object]]:
    routes: list[tuple[str, str, object]] = []
    for key in (other.benchmark_id, other.benchmark_ref, other.benchmark_name):
        routes.append(("GET", f"/benchmarks/{e(key)}", None))
    for key in (other.run_id, other.run_name):
        routes += [
            ("GET", f"/benchmark-runs/{e(key)}", None),
            ("GET", f"/benchmark-runs/{e(key)}/logs?limit=50&direction=older", None),
            ("POST", f"/benchmark-runs/{e(key)}/stop", {}),
            (
                "GET",
                f"/benchmark-runs/{e(key)}/outputs/manifest?types=summary%2Cresults%2Cartifacts%2Clogs",
                None,
            ),
            ("POST", f"/benchmark-runs/{e(key)}/outputs/download-urls", {"items": [{"path": "summary.csv"}]}),
        ]
    routes.append(("DELETE", "/environment-secrets", {"name": other.secret, "scope": "user"}))
    return routes


def v1_routes(other: Resources) -> list[tuple[str, str, object]]:
    routes: list[tuple[str, str, object]] = []
    for key in (other.benchmark_id, e(other.benchmark_ref)):
        routes += [
            ("GET", f"/benchmarks/{key}", None),
            ("GET", f"/benchmarks/{key}/leaderboard", None),
            ("POST", f"/benchmarks/{key}/sync", None),
            ("DELETE", f"/benchmarks/{key}", None),
        ]
    for key in (other.run_id, other.run_name):
        routes += [
            ("GET", f"/runs/{key}", None),
            ("GET", f"/runs/{key}/attempts", None),
            ("GET", f"/runs/{key}/logs", None),
            ("POST", f"/runs/{key}/stop", None),
            ("GET", f"/runs/{key}/downloads?types=all", None),
        ]
    routes += [
        ("DELETE", f"/secrets?name={other.secret}&scope=user", None),
        ("DELETE", f"/tokens/{other.token_id}", None),
        ("POST", f"/workspaces/{e(other.workspace)}/members", {"email": "x@example.com"}),
    ]
    return routes


def assert_isolated(gw: Gateway, me: Resources, other: Resources) -> None:
    before = gw.event_count()
    for method, path, body in cli_routes(other):
        kwargs = {"json": body} if body is not None else {}
        own = gw.cli(method, path, token=me.token, workspace=me.workspace, **kwargs)
        flat_error(own, 404, "NOT_FOUND")
        foreign = gw.cli(method, path, token=me.token, workspace=other.workspace, **kwargs)
        flat_error(foreign, 404, "WORKSPACE_SCOPE_HEADER_ACCESS_DENIED")
    for path in ("/benchmarks", "/benchmark-runs", "/environment-secrets?scope=all"):
        flat_error(gw.cli("GET", path, token=me.token, workspace=other.workspace), 404)
    for method, path, body in v1_routes(other):
        kwargs = {"json": body} if body is not None else {}
        own = gw.v1(method, path, token=me.token, workspace=me.workspace, **kwargs)
        assert own.status_code == 404, (method, path, own.text)
        foreign = gw.v1(method, path, token=me.token, workspace=other.workspace, **kwargs)
        assert foreign.status_code == 404, (method, path, foreign.text)
    listed = gw.ok(
        gw.cli(
            "GET", f"/benchmark-runs?benchmark={other.benchmark_id}", token=me.token, workspace=me.workspace
        )
    )
    assert listed["total_count"] == 0 and listed["benchmark_runs"] == []
    texts = [
        gw.cli("GET", "/benchmarks?limit=50", token=me.token, workspace=me.workspace).text,
        gw.cli("GET", "/benchmark-runs?limit=50", token=me.token, workspace=me.workspace).text,
        gw.cli("GET", "/environment-secrets?scope=all", token=me.token, workspace=me.workspace).text,
        gw.v1("GET", "/secrets", token=me.token, workspace=me.workspace).text,
        gw.v1("GET", "/runs", token=me.token, workspace=me.workspace).text,
        gw.v1("GET", "/benchmarks", token=me.token, workspace=me.workspace).text,
    ]
    for text in texts:
        assert other.benchmark_id not in text and other.run_id not in text and other.secret not in text
    assert gw.event_count() == before


def test_workspaces_see_nothing_of_each_other(pg_gateway: Gateway) -> None:
    gw = pg_gateway
    alice = gw.member("default", "alice@a.example")
    gw.workspace("beta")
    bob = gw.member("beta", "bob@b.example", role="admin")
    a = seed(gw, "default", alice, "a")
    b = seed(gw, "beta", bob, "b")
    assert_isolated(gw, a, b)
    assert_isolated(gw, b, a)
    detail = gw.ok(gw.cli("GET", f"/benchmark-runs/{b.run_id}", token=bob, workspace="beta"))
    assert detail["benchmark_run"]["status"] == "finished"
