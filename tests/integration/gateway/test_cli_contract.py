"""`/api/cli` as the Osmosis CLI 0.3.8 calls it (docs/reference/osmosis-cli-contract.md §2-§4): shapes,
errors, paging."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest

from .conftest import ADMIN_TOKEN, Gateway, demo_config

ALLOWED_NULLS = {"next_offset", "next_cursor", "workspace", "details", "token"}


def nulls(value: Any, path: str = "") -> list[str]:
    """Paths of nulls the client would trip on (§2.4); a few keys may be null by contract."""
    found: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if item is None and key not in ALLOWED_NULLS:
                found.append(f"{path}.{key}")
            found += nulls(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            if item is None:
                found.append(f"{path}[{index}]")
            found += nulls(item, f"{path}[{index}]")
    return found


def flat_error(response: Any, status: int, code: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert isinstance(body, dict)
    assert isinstance(body["message"], str) and body["message"]
    assert isinstance(body["error"], str)
    assert not isinstance(body.get("error"), dict)
    if code:
        assert body["code"] == code, body
    return body


def e(value: str) -> str:
    return quote(value, safe="")


ROUTES = [
    ("GET", "/benchmarks?limit=50&offset=0", None),
    ("GET", "/benchmarks/demo", None),
    ("GET", "/benchmark-runs?limit=50&offset=0", None),
    ("POST", "/benchmark-runs", demo_config()),
    ("GET", "/benchmark-runs/some-run", None),
    ("GET", "/benchmark-runs/some-run/logs?limit=50&direction=older", None),
    ("POST", "/benchmark-runs/some-run/stop", {}),
    ("GET", "/benchmark-runs/some-run/outputs/manifest?types=summary%2Cresults", None),
    ("POST", "/benchmark-runs/some-run/outputs/download-urls", {"items": [{"path": "summary.csv"}]}),
    ("GET", "/environment-secrets?limit=50&offset=0&scope=all", None),
    ("POST", "/environment-secrets", {"name": "K", "value": "v", "scope": "user"}),
    ("DELETE", "/environment-secrets", {"name": "K", "scope": "user"}),
]


@pytest.mark.parametrize(("method", "path", "body"), ROUTES)
def test_every_route_checks_token_then_scope_headers(
    pg_gateway: Gateway, method: str, path: str, body: Any
) -> None:
    gw = pg_gateway
    kwargs = {"json": body} if body is not None else {}
    missing = gw.client.request(
        method, f"/api/cli{path}", headers={"X-Osmosis-Workspace": "default"}, **kwargs
    )
    flat_error(missing, 401, "AUTH_HEADER_MISSING")
    flat_error(gw.cli(method, path, token="rg_nope", **kwargs), 401, "TOKEN_INVALID")
    flat_error(gw.cli(method, path, workspace=None, **kwargs), 400, "GIT_SCOPE_HEADER_REQUIRED")
    both = gw.cli(method, path, headers={"X-Osmosis-Git": "acme/bench"}, **kwargs)
    flat_error(both, 400, "WORKSPACE_SCOPE_HEADER_CONFLICT")
    flat_error(gw.cli(method, path, workspace="nope", **kwargs), 404, "WORKSPACE_SCOPE_HEADER_ACCESS_DENIED")
    git = {"X-Osmosis-Git": "acme/unknown"}
    flat_error(
        gw.cli(method, path, workspace=None, headers=git, **kwargs), 404, "GIT_REPOSITORY_NOT_CONNECTED"
    )
    bad_git = {"X-Osmosis-Git": "not a repo"}
    flat_error(
        gw.cli(method, path, workspace=None, headers=bad_git, **kwargs), 400, "GIT_SCOPE_HEADER_INVALID"
    )


def test_git_header_maps_to_the_workspace_named_like_the_repository(pg_gateway: Gateway) -> None:
    gw = pg_gateway
    gw.workspace("Acme/Bench-WS")
    gw.benchmark("gitbench", ["t1"], workspace="Acme/Bench-WS")
    page = gw.ok(gw.cli("GET", "/benchmarks", workspace=None, headers={"X-Osmosis-Git": "acme/bench-ws"}))
    assert [b["name"] for b in page["benchmarks"]] == ["gitbench"]
    outsider = gw.member("default", "outsider@example.com")
    denied = gw.cli(
        "GET", "/benchmarks", token=outsider, workspace=None, headers={"X-Osmosis-Git": "acme/bench-ws"}
    )
    flat_error(denied, 404, "GIT_REPOSITORY_NOT_CONNECTED")


def test_benchmarks_list_types_nulls_and_offset_pages(gateway: Gateway) -> None:
    gw = gateway
    for name in ("alpha", "beta", "gamma"):
        gw.benchmark(name, ["t1", "t2"], categories={"t1": "math"})
    gw.benchmark("syncing", ["t1"], ready=False)
    first = gw.ok(gw.cli("GET", "/benchmarks?limit=3&offset=0"))
    assert (first["total_count"], first["has_more"], first["next_offset"]) == (4, True, 3)
    last = gw.ok(gw.cli("GET", "/benchmarks?limit=3&offset=3"))
    assert (len(last["benchmarks"]), last["has_more"], last["next_offset"]) == (1, False, None)
    items = first["benchmarks"] + last["benchmarks"]
    assert nulls(first) == [] and nulls(last) == []
    for item in items:
        for key, kind in [
            ("id", str),
            ("name", str),
            ("source_type", str),
            ("source_ref", str),
            ("task_count", int),
            ("category_count", int),
            ("task_sets", list),
            ("sync_status", str),
            ("synced_task_count", int),
            ("run_count", int),
            ("running_count", int),
        ]:
            assert isinstance(item[key], kind), (key, item)
    ready = {i["name"]: i for i in items}
    assert (ready["alpha"]["task_count"], ready["alpha"]["category_count"]) == (2, 1)
    assert ready["syncing"]["sync_status"] == "pending"
    for bad in ("limit=51", "limit=0", "limit=x", "offset=-1"):
        body = flat_error(gw.cli("GET", f"/benchmarks?{bad}"), 400, "VALIDATION")
        assert body["field"] == bad.split("=")[0]


def test_benchmark_detail_by_key_name_id_and_encoded_slashes(gateway: Gateway) -> None:
    gw = gateway
    benchmark_id = gw.benchmark("demo", ["t1", "t2", "t3"], categories={"t1": "a", "t2": "a", "t3": "b"})
    source_ref = "/srv/benchmarks/demo"
    for key in (source_ref, "demo", benchmark_id):
        detail = gw.ok(gw.cli("GET", f"/benchmarks/{e(key)}"))
        assert set(detail) == {"benchmark", "leaderboard"} and nulls(detail) == []
        benchmark = detail["benchmark"]
        assert benchmark["id"] == benchmark_id and benchmark["source_ref"] == source_ref
        assert isinstance(benchmark["runner_family"], str)
        for flag in (
            "supports_harness",
            "requires_harness",
            "requires_judge_model",
            "requires_judge_api_key",
        ):
            assert isinstance(benchmark[flag], bool)
        assert isinstance(benchmark["pass_threshold"], float)
        assert benchmark["categories"] == [{"name": "a", "task_count": 2}, {"name": "b", "task_count": 1}]
        assert [t["name"] for t in benchmark["tasks"]] == ["t1", "t2", "t3"]
        assert detail["leaderboard"] == []
    flat_error(gw.cli("GET", f"/benchmarks/{e('no/such')}"), 404, "NOT_FOUND")


def test_submit_returns_the_contract_fields_and_runs_list_filters(gateway: Gateway) -> None:
    gw = gateway
    demo = gw.benchmark("demo", ["t1", "t2"])
    gw.benchmark("other", ["x"])
    created = gw.submit(demo_config())
    assert set(created) >= {"id", "name", "status", "created_at", "workflow_id", "task_count"}
    assert created["status"] == "pending" and created["task_count"] == 2
    assert all(isinstance(created[k], str) for k in ("id", "name", "status", "created_at", "workflow_id"))
    assert created["created_at"].endswith("Z")
    gw.submit(demo_config())
    gw.submit(demo_config("other"))
    page = gw.ok(gw.cli("GET", f"/benchmark-runs?limit=1&offset=0&benchmark={demo}"))
    assert (page["total_count"], page["has_more"], page["next_offset"]) == (2, True, 1)
    rest = gw.ok(gw.cli("GET", f"/benchmark-runs?limit=1&offset=1&benchmark={demo}"))
    assert (rest["has_more"], rest["next_offset"]) == (False, None)
    assert nulls(page) == [] and nulls(rest) == []
    run = page["benchmark_runs"][0]
    for key, kind in [
        ("id", str),
        ("name", str),
        ("status", str),
        ("benchmark_name", str),
        ("benchmark_id", str),
        ("created_at", str),
        ("agent_count", int),
        ("ingested_results", int),
        ("expected_results", int),
    ]:
        assert isinstance(run[key], kind), key
    assert run["benchmark_id"] == demo and run["agent_count"] == 2
    everything = gw.ok(gw.cli("GET", "/benchmark-runs?limit=50&offset=0"))
    assert everything["total_count"] == 3 and everything["next_offset"] is None
    flat_error(gw.cli("GET", "/benchmark-runs?limit=51"), 400, "VALIDATION")


def test_run_detail_resolves_names_with_encoded_slashes_and_has_no_nulls(gateway: Gateway) -> None:
    gw = gateway
    gw.benchmark("demo", ["t1", "t2"])
    created = gw.submit({**demo_config(), "name": "team a/run 1"})
    pending = gw.ok(gw.cli("GET", f"/benchmark-runs/{e('team a/run 1')}"))
    assert pending["benchmark_run"]["id"] == created["id"] and nulls(pending) == []
    gw.progress(created["id"])
    for key in ("team a/run 1", created["id"]):
        detail = gw.ok(gw.cli("GET", f"/benchmark-runs/{e(key)}"))
        assert nulls(detail) == []
        run = detail["benchmark_run"]
        assert (run["id"], run["status"], run["best_pass_at_1"]) == (created["id"], "finished", 1.0)
        assert detail["progress"] == {"ingested": 4, "expected": 4}
        assert isinstance(detail["agents"], list) and len(detail["agents"]) == 2
        metrics = detail["agent_metrics"]
        assert [m["pass_at_1"]["value"] for m in metrics] == [1.0, 0.0]
        assert all(isinstance(m["pass_at_k"], list) and isinstance(m["n_tasks"], int) for m in metrics)
        assert detail["totals"]["passed"] == 2 and detail["totals"]["failed"] == 2
        configuration = detail["configuration"]
        assert (
            configuration["source_type"] == "folder" and configuration["source_ref"] == "/srv/benchmarks/demo"
        )
        assert configuration["resolved_secret_scopes"] == {}
    flat_error(gw.cli("GET", "/benchmark-runs/no-such-run"), 404, "NOT_FOUND")


def test_logs_page_newest_first_oldest_first_within_a_page(gateway: Gateway) -> None:
    gw = gateway
    gw.benchmark("demo", ["t1", "t2"])
    created = gw.submit(demo_config())
    gw.progress(created["id"])
    everything = gw.ok(gw.cli("GET", f"/benchmark-runs/{created['id']}/logs?limit=200&direction=older"))
    assert everything["next_cursor"] is None
    entries = everything["logs"]
    assert entries[0]["step"] == "submit" and entries[-1]["step"] == "finish"
    assert all(
        isinstance(entry[k], str) for entry in entries for k in ("timestamp", "level", "step", "message")
    )
    pages: list[list[dict[str, Any]]] = []
    cursor = None
    while True:
        query = "limit=3&direction=older" + (f"&cursor={e(cursor)}" if cursor else "")
        page = gw.ok(gw.cli("GET", f"/benchmark-runs/{e(created['name'])}/logs?{query}"))
        assert 0 < len(page["logs"]) <= 3
        pages.append(page["logs"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
        assert isinstance(cursor, str)
    assert pages[0] == entries[-3:]
    assert [entry for page in reversed(pages) for entry in page] == entries
    for bad in ("limit=201", "limit=0", "direction=newer", "cursor=abc"):
        flat_error(gw.cli("GET", f"/benchmark-runs/{created['id']}/logs?{bad}"), 400)


def test_stop_answers_an_object_and_409_for_a_terminal_run(gateway: Gateway) -> None:
    gw = gateway
    gw.benchmark("demo", ["t1"])
    running = gw.submit(demo_config())
    response = gw.cli("POST", f"/benchmark-runs/{running['id']}/stop", json={})
    assert response.status_code in (200, 202, 204)
    assert isinstance(response.json(), dict)
    detail = gw.ok(gw.cli("GET", f"/benchmark-runs/{running['id']}/logs?limit=50&direction=older"))
    assert detail["logs"][-1]["step"] == "stop"
    finished = gw.submit(demo_config())
    gw.progress(finished["id"])
    body = flat_error(gw.cli("POST", f"/benchmark-runs/{finished['id']}/stop", json={}), 409, "CONFLICT")
    assert "finished" in body["message"]


def test_secrets_upsert_list_filter_and_delete_with_a_json_body(gateway: Gateway) -> None:
    gw = gateway
    saved = gw.ok(
        gw.cli(
            "POST", "/environment-secrets", json={"name": "OPENAI_API_KEY", "value": "sk-1", "scope": "user"}
        )
    )
    assert set(saved) >= {"id", "name", "scope", "created_at", "updated_at"} and saved["scope"] == "user"
    again = gw.ok(
        gw.cli(
            "POST", "/environment-secrets", json={"name": "OPENAI_API_KEY", "value": "sk-2", "scope": "user"}
        )
    )
    assert again["id"] == saved["id"]
    gw.ok(
        gw.cli(
            "POST",
            "/environment-secrets",
            json={"name": "OPENAI_API_KEY", "value": "ws", "scope": "workspace"},
        )
    )
    for index in range(3):
        gw.ok(
            gw.cli(
                "POST",
                "/environment-secrets",
                json={"name": f"EXTRA_{index}", "value": "x", "scope": "workspace"},
            )
        )
    every = gw.ok(gw.cli("GET", "/environment-secrets?limit=50&offset=0&scope=all"))
    assert every["total_count"] == 5 and every["next_offset"] is None and nulls(every) == []
    assert {(s["name"], s["scope"]) for s in every["environment_secrets"]} >= {
        ("OPENAI_API_KEY", "user"),
        ("OPENAI_API_KEY", "workspace"),
    }
    assert all("value" not in s for s in every["environment_secrets"])
    mine = gw.ok(gw.cli("GET", "/environment-secrets?limit=50&offset=0&scope=user"))
    assert [(s["name"], s["scope"]) for s in mine["environment_secrets"]] == [("OPENAI_API_KEY", "user")]
    shared = gw.ok(gw.cli("GET", "/environment-secrets?limit=2&offset=0&scope=workspace"))
    assert (shared["total_count"], shared["has_more"], shared["next_offset"]) == (4, True, 2)
    deleted = gw.cli("DELETE", "/environment-secrets", json={"name": "OPENAI_API_KEY", "scope": "user"})
    assert deleted.status_code == 204 and deleted.content == b""
    flat_error(
        gw.cli("DELETE", "/environment-secrets", json={"name": "OPENAI_API_KEY", "scope": "user"}),
        404,
        "NOT_FOUND",
    )
    left = gw.ok(gw.cli("GET", "/environment-secrets?scope=all"))
    assert ("OPENAI_API_KEY", "workspace") in {(s["name"], s["scope"]) for s in left["environment_secrets"]}
    for body, field in [
        ({"name": "lower", "value": "v", "scope": "user"}, "name"),
        ({"name": "OK", "value": "", "scope": "user"}, "value"),
        ({"name": "OK", "value": "v", "scope": "team"}, "scope"),
    ]:
        assert (
            flat_error(gw.cli("POST", "/environment-secrets", json=body), 400, "VALIDATION")["field"] == field
        )
    flat_error(gw.cli("GET", "/environment-secrets?scope=personal"), 400, "VALIDATION")
    flat_error(gw.cli("POST", "/environment-secrets", content=b"[1, 2]"), 400, "VALIDATION")


def test_workspace_secrets_need_an_admin(pg_gateway: Gateway) -> None:
    gw = pg_gateway
    member = gw.member("default", "member@example.com")
    body = {"name": "SHARED_KEY", "value": "v", "scope": "workspace"}
    flat_error(gw.cli("POST", "/environment-secrets", json=body, token=member), 403)
    gw.ok(gw.cli("POST", "/environment-secrets", json=body))
    flat_error(
        gw.cli(
            "DELETE", "/environment-secrets", json={"name": "SHARED_KEY", "scope": "workspace"}, token=member
        ),
        403,
    )
    personal = gw.cli("POST", "/environment-secrets", json={**body, "scope": "user"}, token=member)
    assert personal.status_code in (200, 201), personal.text


def test_verify_reports_user_token_and_git_workspace(pg_gateway: Gateway) -> None:
    gw = pg_gateway
    headers = {k: v for k, v in {"User-Agent": "osmosis-cli/0.3.8"}.items()}
    plain = gw.client.get("/api/cli/verify", headers={**headers, "Authorization": f"Bearer {ADMIN_TOKEN}"})
    body = gw.ok(plain)
    assert body["user"]["id"] and body["user"]["email"] and body["token_id"] and body["workspace"] is None
    gw.workspace("acme/ws")
    scoped = gw.client.get(
        "/api/cli/verify", headers={"Authorization": f"Bearer {ADMIN_TOKEN}", "X-Osmosis-Git": "acme/ws"}
    )
    assert gw.ok(scoped)["workspace"]["name"] == "acme/ws"
    expiring = gw.ok(gw.v1("POST", "/tokens", json={"name": "ci", "expires_in_seconds": 3600}), 201)
    seen = gw.ok(gw.client.get("/api/cli/verify", headers={"Authorization": f"Bearer {expiring['token']}"}))
    assert seen["expires_at"] == expiring["expires_at"] and seen["expires_at"].endswith("Z")
    flat_error(gw.client.get("/api/cli/verify"), 401, "AUTH_HEADER_MISSING")


def test_no_redirects_no_gzip_and_flat_404_for_unknown_routes(pg_gateway: Gateway) -> None:
    gw = pg_gateway
    flat_error(gw.cli("GET", "/benchmarks/"), 404)
    flat_error(gw.cli("GET", "/nothing/here"), 404, "NOT_FOUND")
    big = gw.cli("GET", "/benchmarks", headers={"Accept-Encoding": "gzip"})
    assert big.status_code == 200 and "content-encoding" not in big.headers
    malformed = gw.cli("POST", "/benchmark-runs", content=b"{not json")
    flat_error(malformed, 400, "VALIDATION")
