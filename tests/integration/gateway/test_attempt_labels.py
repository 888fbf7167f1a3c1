"""Labels on attempts (issue 30, Annotate): recorded as events, listed with the attempts and filterable,
in results.csv, in the audit log and the run's logs; bad input changes nothing."""

from __future__ import annotations

import csv
import io
from typing import Any

from .conftest import Gateway, demo_config
from .test_cli_downloads import fetch


def finished_run(gw: Gateway) -> dict[str, Any]:
    gw.benchmark("demo", ["t1", "t2"])
    run = gw.submit(demo_config(execution_config={"attempts_per_task": 1}))
    gw.progress(run["id"])
    return run


def attempts(gw: Gateway, run_id: str, **params: Any) -> list[dict[str, Any]]:
    return gw.ok(gw.v1("GET", f"/runs/{run_id}/attempts", params=params))["attempts"]


def label(gw: Gateway, run_key: str, attempt_id: str, body: dict[str, Any]) -> Any:
    return gw.v1("POST", f"/runs/{run_key}/attempts/{attempt_id}/labels", json=body)


def test_a_label_is_listed_filtered_exported_audited_and_removed(gateway: Gateway) -> None:
    gw = gateway
    run = finished_run(gw)
    first, second, *rest = attempts(gw, run["id"])
    assert all(a["labels"] == [] for a in [first, second, *rest])

    made = gw.ok(
        label(gw, run["name"], first["attempt_id"], {"label": "  Reward   Hacking ", "note": "wrote reward"}),
        201,
    )
    assert made["label"] == "reward hacking" and made["note"] == "wrote reward"
    gw.ok(label(gw, run["id"], second["attempt_id"], {"label": "flaky task"}), 201)

    listed = {a["attempt_id"]: a["labels"] for a in attempts(gw, run["id"])}
    assert [x["label"] for x in listed[first["attempt_id"]]] == ["reward hacking"]
    assert listed[first["attempt_id"]][0]["note"] == "wrote reward"
    assert listed[first["attempt_id"]][0]["by"]  # the admin's display name
    assert [x["label"] for x in listed[second["attempt_id"]]] == ["flaky task"]
    # The filter, whole and paged.
    assert [a["attempt_id"] for a in attempts(gw, run["id"], label="reward hacking")] == [first["attempt_id"]]
    paged = gw.ok(gw.v1("GET", f"/runs/{run['id']}/attempts", params={"label": "flaky task", "limit": 5}))
    assert [a["attempt_id"] for a in paged["attempts"]] == [second["attempt_id"]]
    assert attempts(gw, run["id"], label="infra") == []

    # results.csv, rebuilt from the run's events at the manifest's version.
    manifest = gw.ok(gw.v1("GET", f"/runs/{run['id']}/downloads", params={"types": "results"}))
    body = fetch(gw, manifest["files"][0]["url"]).text
    rows = {r["attempt_id"]: r for r in csv.DictReader(io.StringIO(body))}
    assert rows[first["attempt_id"]]["labels"] == "reward hacking"
    assert rows[first["attempt_id"]]["label_notes"] == "reward hacking: wrote reward"
    assert rows[second["attempt_id"]]["labels"] == "flaky task"
    assert all(rows[a["attempt_id"]]["labels"] == "" for a in rest)

    # The audit log and the run's logs say who labelled what.
    gw.client.app.state.ops_projections.catch_up()  # type: ignore[attr-defined]
    audit = gw.ok(gw.v1("GET", "/audit", params={"kind": "AttemptLabelled"}))["entries"]
    assert len(audit) == 2 and any("label=reward hacking" in e["summary"] for e in audit)
    logs = gw.ok(gw.v1("GET", f"/runs/{run['id']}/logs"))["logs"]
    assert any(e["step"] == "label" and "reward hacking" in e["message"] for e in logs)

    # Taking it off.
    response = gw.v1("DELETE", f"/runs/{run['id']}/attempts/{first['attempt_id']}/labels/{made['id']}")
    assert response.status_code == 204, response.text
    assert attempts(gw, run["id"], label="reward hacking") == []
    assert gw.ok(gw.v1("GET", "/audit", params={"kind": "AttemptLabelRemoved"}))["entries"]
    # Labels never touch scores.
    assert gw.ok(gw.v1("GET", f"/runs/{run['id']}"))["benchmark_run"]["status"] == "finished"


def test_bad_labels_are_refused_by_field_and_append_nothing(gateway: Gateway) -> None:
    gw = gateway
    run = finished_run(gw)
    attempt = attempts(gw, run["id"])[0]["attempt_id"]
    gw.ok(label(gw, run["id"], attempt, {"label": "infra"}), 201)
    before = gw.event_count()
    cases = [
        ({}, 400, "label"),
        ({"label": ""}, 400, "label"),
        ({"label": 7}, 400, "label"),
        ({"label": "x" * 41}, 400, "label"),
        ({"label": "<script>"}, 400, "label"),
        ({"label": "über"}, 400, "label"),
        ({"label": "ok", "note": "n" * 2001}, 400, "note"),
        ({"label": "ok", "note": "bell\x07"}, 400, "note"),
        ({"label": "ok", "note": ["list"]}, 400, "note"),
        ({"label": "INFRA"}, 409, "label"),  # already there, whatever its case
    ]
    for body, status, field in cases:
        response = label(gw, run["id"], attempt, body)
        assert response.status_code == status, (body, response.text)
        assert field in response.text, (body, response.text)
    assert label(gw, run["id"], "att_0000000000000000dead", {"label": "ok"}).status_code == 404
    assert label(gw, run["id"], "../../etc", {"label": "ok"}).status_code in (400, 404)
    assert gw.v1("DELETE", f"/runs/{run['id']}/attempts/{attempt}/labels/lbl_missing").status_code == 404
    assert gw.event_count() == before
