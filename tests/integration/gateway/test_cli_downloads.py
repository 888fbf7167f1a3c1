"""Run downloads (contract §4.8-4.10): manifest, signed URLs served by the gateway, snapshots, tampering."""

from __future__ import annotations

import csv
import io
import time
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from regatta_gateway.queries.downloads import sign_url

from .conftest import Gateway, demo_config
from .test_cli_contract import flat_error

ARTIFACTS = {
    "agent/trajectory.json": b'{"steps": []}',
    "verifier/reward.txt": b"1\n",
    "result.json": b'{"ok": true}',
}


def finished_run(gw: Gateway, attempts: int = 1) -> dict[str, Any]:
    gw.benchmark("demo", ["t1", "t2"])
    created = gw.submit(demo_config(execution_config={"attempts_per_task": attempts}))
    gw.progress(created["id"], artifacts=ARTIFACTS)
    return created


def urls_for(gw: Gateway, run_id: str, files: list[dict[str, Any]]) -> dict[str, str]:
    items = [{"path": f["path"], "token": f["token"]} for f in files]
    body = gw.ok(gw.cli("POST", f"/benchmark-runs/{run_id}/outputs/download-urls", json={"items": items}))
    assert isinstance(body["expires_in"], int)
    return {item["path"]: item["url"] for item in body["items"]}


def fetch(gw: Gateway, url: str) -> Any:
    """The CLI fetches with httpx, no Authorization and no X-Osmosis headers."""
    assert url.startswith("http://testserver/")
    return gw.client.get(url, headers={"Authorization": ""}, follow_redirects=False)


def test_manifest_layout_sizes_and_signed_files(gateway: Gateway) -> None:
    gw = gateway
    run = finished_run(gw, attempts=2)
    manifest = gw.ok(
        gw.cli(
            "GET", f"/benchmark-runs/{run['id']}/outputs/manifest?types=summary%2Cresults%2Cartifacts%2Clogs"
        )
    )
    paths = [f["path"] for f in manifest["files"]]
    assert paths[:3] == ["summary.csv", "results.csv", "logs.txt"]
    artifacts = paths[3:]
    assert len(artifacts) == 2 * 2 * 2 * len(ARTIFACTS)
    assert "artifacts/t1/agent-1-attempt-2/agent/trajectory.json" in artifacts
    assert all(p.startswith("artifacts/") and len(p.split("/")) >= 3 for p in artifacts)
    assert all(
        type(f["size"]) is int and f["size"] >= 0 and isinstance(f["token"], str) for f in manifest["files"]
    )
    assert isinstance(manifest["totals"], dict)
    urls = urls_for(gw, run["id"], manifest["files"])
    assert set(urls) == set(paths)
    bodies = {}
    for item in manifest["files"]:
        response = fetch(gw, urls[item["path"]])
        assert response.status_code == 200, response.text
        assert "content-encoding" not in response.headers
        assert len(response.content) == item["size"]
        bodies[item["path"]] = response.content
    assert bodies["artifacts/t2/agent-2-attempt-1/verifier/reward.txt"] == b"1\n"
    summary = list(csv.DictReader(io.StringIO(bodies["summary.csv"].decode())))
    assert [(r["agent"], r["harness"], r["pass_at_1"], r["passed"], r["final"]) for r in summary] == [
        ("1", "oracle", "1.0", "4", "true"),
        ("2", "nop", "0.0", "0", "true"),
    ]
    assert {"pass_at_1_ci_low", "pass_at_k", "cost_usd", "input_tokens", "time_per_task_seconds"} <= set(
        summary[0]
    )
    results = list(csv.DictReader(io.StringIO(bodies["results.csv"].decode())))
    assert len(results) == 2 * 2 * 2
    assert {r["outcome"] for r in results if r["agent"] == "1"} == {"passed"}
    assert results[0]["artifact_count"] == str(len(ARTIFACTS))
    logs = bodies["logs.txt"].decode().splitlines()
    assert "[submit]" in logs[0] and "[finish]" in logs[-1]


def test_manifest_returns_only_the_requested_types(gateway: Gateway) -> None:
    gw = gateway
    run = finished_run(gw)
    default = gw.ok(gw.cli("GET", f"/benchmark-runs/{run['id']}/outputs/manifest"))
    assert [f["path"] for f in default["files"]] == ["summary.csv", "results.csv"]
    logs = gw.ok(gw.cli("GET", f"/benchmark-runs/{run['id']}/outputs/manifest?types=logs"))
    assert [f["path"] for f in logs["files"]] == ["logs.txt"]
    only = gw.ok(gw.cli("GET", f"/benchmark-runs/{run['id']}/outputs/manifest?types=artifacts"))
    assert only["files"] and all(f["path"].startswith("artifacts/") for f in only["files"])
    flat_error(
        gw.cli("GET", f"/benchmark-runs/{run['id']}/outputs/manifest?types=metrics"), 400, "VALIDATION"
    )


def test_pending_and_queued_runs_have_nothing_to_download(gateway: Gateway) -> None:
    gw = gateway
    gw.benchmark("demo", ["t1"])
    run = gw.submit(demo_config())
    flat_error(gw.cli("GET", f"/benchmark-runs/{run['id']}/outputs/manifest"), 409, "CONFLICT")
    body = {"items": [{"path": "summary.csv"}]}
    flat_error(
        gw.cli("POST", f"/benchmark-runs/{run['id']}/outputs/download-urls", json=body), 409, "CONFLICT"
    )


def test_a_running_run_downloads_the_snapshot_its_manifest_pinned(gateway: Gateway) -> None:
    gw = gateway
    gw.benchmark("demo", ["t1", "t2"])
    run = gw.submit(demo_config())
    gw.progress(run["id"], finish=False)
    manifest = gw.ok(
        gw.cli("GET", f"/benchmark-runs/{run['id']}/outputs/manifest?types=summary%2Cresults%2Clogs")
    )
    assert manifest["totals"]["run_status"] == "running"
    urls = urls_for(gw, run["id"], manifest["files"])
    gw.store.append(f"run-{run['id']}", [_finished_event(run["id"])])
    gw.settle()
    for item in manifest["files"]:
        response = fetch(gw, urls[item["path"]])
        assert len(response.content) == item["size"], item["path"]
    newer = gw.ok(gw.cli("GET", f"/benchmark-runs/{run['id']}/outputs/manifest?types=logs"))
    assert newer["files"][0]["size"] > manifest["files"][2]["size"]
    assert newer["files"][0]["token"] != manifest["files"][2]["token"]


def _finished_event(run_id: str) -> Any:
    from regatta_shared.events import RunFinished
    from regatta_shared.events.envelope import new_event

    return new_event(RunFinished(run_id=run_id), actor="scoring")


def test_signed_urls_are_bound_to_one_file_and_expire(gateway: Gateway) -> None:
    gw = gateway
    run = finished_run(gw)
    manifest = gw.ok(gw.cli("GET", f"/benchmark-runs/{run['id']}/outputs/manifest?types=all"))
    urls = urls_for(gw, run["id"], manifest["files"])
    summary = urlsplit(urls["summary.csv"])
    query = parse_qs(summary.query)
    other = urlsplit(urls["results.csv"])
    swapped = f"http://testserver{other.path}?{summary.query}"
    flat_error(fetch(gw, swapped), 403)
    tampered = {**{k: v[0] for k, v in query.items()}, "exp": str(int(query["exp"][0]) + 60)}
    flat_error(fetch(gw, f"http://testserver{summary.path}?{urlencode(tampered)}"), 403)
    flat_error(fetch(gw, f"http://testserver{summary.path}"), 403)
    key = gw.client.app.state.keys.url_signing  # type: ignore[attr-defined]
    version = int(query["v"][0])
    expired = sign_url("http://testserver", key, run["id"], "summary.csv", version, int(time.time()) - 1)
    flat_error(fetch(gw, expired), 403)
    other_key = sign_url(
        "http://testserver", b"k" * 32, run["id"], "summary.csv", version, int(time.time()) + 60
    )
    flat_error(fetch(gw, other_key), 403)
    assert fetch(gw, urls["summary.csv"]).status_code == 200


def test_download_urls_leave_out_files_the_run_does_not_have(gateway: Gateway) -> None:
    gw = gateway
    run = finished_run(gw)
    items = [
        {"path": "summary.csv"},
        {"path": "artifacts/t9/agent-1-attempt-1/secret.txt", "token": "v1"},
        {"path": "results.csv", "token": "v999"},
        {"path": "logs.txt", "token": "bogus"},
    ]
    body = gw.ok(gw.cli("POST", f"/benchmark-runs/{run['id']}/outputs/download-urls", json={"items": items}))
    assert [item["path"] for item in body["items"]] == ["summary.csv"]
    assert body["items"][0]["token"] is None
    for bad in ({"items": []}, {"items": "x"}, {"items": [{"token": "v1"}]}):
        flat_error(gw.cli("POST", f"/benchmark-runs/{run['id']}/outputs/download-urls", json=bad), 400)


def test_v1_downloads_manifest_carries_signed_urls(gateway: Gateway) -> None:
    gw = gateway
    run = finished_run(gw)
    body = gw.ok(gw.v1("GET", f"/runs/{run['name']}/downloads", params={"types": "summary,artifacts"}))
    assert body["files"][0]["path"] == "summary.csv"
    for item in body["files"]:
        response = fetch(gw, item["url"])
        assert response.status_code == 200 and len(response.content) == item["size"]
