"""Labels on attempts (issue 30, Annotate): recorded as events, listed with the attempts and filterable,
in results.csv, in the audit log and the run's logs; bad input changes nothing. Putting a label on and
taking it off are `commands/annotations.py`, and where it is listed are queries: tested on the service
layer. results.csv (a download's body) and the routes' 201/204/400/404/409 stay on HTTP."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from typing import Any

from regatta_gateway.commands import annotations
from regatta_gateway.errors import Conflict, Invalid, NotFound, Refused
from regatta_gateway.queries.audit import list_audit
from regatta_gateway.queries.run_activity import run_logs

from .conftest import Gateway, demo_config
from .service_support import Services, refused
from .test_cli_downloads import fetch


def finished_run(gw: Gateway | Services) -> dict[str, Any]:
    gw.benchmark("demo", ["t1", "t2"])
    run = gw.submit(demo_config(execution_config={"attempts_per_task": 1}))
    gw.progress(run["id"])
    return run


def attempts(sv: Gateway | Services, run_id: str, **filters: Any) -> list[dict[str, Any]]:
    """The run's attempts with their labels; through the API for the CLI's tests (test_cli_labels.py),
    which read back what the CLI recorded over HTTP."""
    if isinstance(sv, Gateway):
        return sv.ok(sv.v1("GET", f"/runs/{run_id}/attempts", params=filters))["attempts"]
    return sv.attempts(run_id, **filters)["attempts"]


def label(sv: Services, run_key: str, attempt_id: str, body: dict[str, Any]) -> Callable[[], dict[str, Any]]:
    """As POST /runs/{key}/attempts/{attempt_id}/labels does with its JSON body."""

    def call() -> dict[str, Any]:
        labelled = annotations.label_attempt(
            sv.store, sv.scope(), run_key, attempt_id, body.get("label"), body.get("note")
        )
        sv.settle()
        return labelled

    return call


def test_a_label_is_listed_filtered_audited_and_removed(services: Services) -> None:
    sv = services
    run = finished_run(sv)
    first, second, *rest = attempts(sv, run["id"])
    assert all(a["labels"] == [] for a in [first, second, *rest])

    made = label(
        sv, run["name"], first["attempt_id"], {"label": "  Reward   Hacking ", "note": "wrote reward"}
    )()
    assert made["label"] == "reward hacking" and made["note"] == "wrote reward"
    label(sv, run["id"], second["attempt_id"], {"label": "flaky task"})()

    listed = {a["attempt_id"]: a["labels"] for a in attempts(sv, run["id"])}
    assert [x["label"] for x in listed[first["attempt_id"]]] == ["reward hacking"]
    assert listed[first["attempt_id"]][0]["note"] == "wrote reward"
    assert listed[first["attempt_id"]][0]["by"]  # the admin's display name
    assert [x["label"] for x in listed[second["attempt_id"]]] == ["flaky task"]
    # The filter, whole and paged.
    assert [a["attempt_id"] for a in attempts(sv, run["id"], label="reward hacking")] == [first["attempt_id"]]
    paged = attempts(sv, run["id"], label="flaky task", limit=5)
    assert [a["attempt_id"] for a in paged] == [second["attempt_id"]]
    assert attempts(sv, run["id"], label="infra") == []

    # The audit log and the run's logs say who labelled what.
    audit = list_audit(sv.store, sv.scope(), kind="AttemptLabelled")["entries"]
    assert len(audit) == 2 and any("label=reward hacking" in e["summary"] for e in audit)
    logs = run_logs(sv.store, sv.scope(), run["id"], 50, None)["logs"]
    assert any(e["step"] == "label" and "reward hacking" in e["message"] for e in logs)

    # Taking it off.
    annotations.remove_label(sv.store, sv.scope(), run["id"], first["attempt_id"], made["id"])
    sv.settle()
    assert attempts(sv, run["id"], label="reward hacking") == []
    assert list_audit(sv.store, sv.scope(), kind="AttemptLabelRemoved")["entries"]
    # Labels never touch scores.
    assert sv.run(run["id"])["benchmark_run"]["status"] == "finished"


def test_a_label_is_in_results_csv_and_the_routes_answer_201_and_204(gateway: Gateway) -> None:
    gw = gateway
    run = finished_run(gw)
    path = f"/runs/{run['id']}/attempts"
    first, second, *rest = gw.ok(gw.v1("GET", path))["attempts"]
    body = {"label": "reward hacking", "note": "wrote reward"}
    made = gw.ok(gw.v1("POST", f"{path}/{first['attempt_id']}/labels", json=body), 201)
    gw.ok(gw.v1("POST", f"{path}/{second['attempt_id']}/labels", json={"label": "flaky task"}), 201)

    # results.csv, rebuilt from the run's events at the manifest's version.
    manifest = gw.ok(gw.v1("GET", f"/runs/{run['id']}/downloads", params={"types": "results"}))
    text = fetch(gw, manifest["files"][0]["url"]).text
    rows = {r["attempt_id"]: r for r in csv.DictReader(io.StringIO(text))}
    assert rows[first["attempt_id"]]["labels"] == "reward hacking"
    assert rows[first["attempt_id"]]["label_notes"] == "reward hacking: wrote reward"
    assert rows[second["attempt_id"]]["labels"] == "flaky task"
    assert all(rows[a["attempt_id"]]["labels"] == "" for a in rest)

    response = gw.v1("DELETE", f"{path}/{first['attempt_id']}/labels/{made['id']}")
    assert response.status_code == 204, response.text
    refusals = [
        (gw.v1("POST", f"{path}/{first['attempt_id']}/labels", json={"label": ""}), 400),
        (gw.v1("POST", f"{path}/{second['attempt_id']}/labels", json={"label": "FLAKY TASK"}), 409),
        (gw.v1("POST", f"{path}/att_0000000000000000dead/labels", json={"label": "ok"}), 404),
    ]
    for refusal, status in refusals:
        assert refusal.status_code == status, refusal.text


def test_bad_labels_are_refused_by_field_and_append_nothing(services: Services) -> None:
    sv = services
    run = finished_run(sv)
    attempt = attempts(sv, run["id"])[0]["attempt_id"]
    label(sv, run["id"], attempt, {"label": "infra"})()
    before = sv.event_count()
    cases: list[tuple[dict[str, Any], type[Refused], str]] = [
        ({}, Invalid, "label"),
        ({"label": ""}, Invalid, "label"),
        ({"label": 7}, Invalid, "label"),
        ({"label": "x" * 41}, Invalid, "label"),
        ({"label": "<script>"}, Invalid, "label"),
        ({"label": "über"}, Invalid, "label"),
        ({"label": "ok", "note": "n" * 2001}, Invalid, "note"),
        ({"label": "ok", "note": "bell\x07"}, Invalid, "note"),
        ({"label": "ok", "note": ["list"]}, Invalid, "note"),
        ({"label": "INFRA"}, Conflict, "label"),  # already there, whatever its case
    ]
    for body, kind, field in cases:
        refusal = refused(label(sv, run["id"], attempt, body), kind)
        # The field at fault is named, as the route's body shows it (`field`, or in the message).
        assert field in (refusal.field or "") + refusal.message, (body, vars(refusal))
    refused(label(sv, run["id"], "att_0000000000000000dead", {"label": "ok"}), NotFound)
    assert isinstance(
        refused(label(sv, run["id"], "../../etc", {"label": "ok"}), Refused), Invalid | NotFound
    )
    refused(
        lambda: annotations.remove_label(sv.store, sv.scope(), run["id"], attempt, "lbl_missing"), NotFound
    )
    assert sv.event_count() == before
