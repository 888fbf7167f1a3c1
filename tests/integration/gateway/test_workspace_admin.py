"""Administering workspaces: default workspace, hosted benchmarks everywhere, rename, delete, members.

Every workspace command is decided on the workspace's own stream and appended at the version it read,
so two conflicting requests at once give one success and one 409 (the last tests).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from regatta_gateway.app import create_app
from regatta_gateway.authentication import authenticate, resolve_scope
from regatta_gateway.commands import workspace_handlers
from regatta_gateway.errors import Conflict, Forbidden, Invalid, NotFound
from regatta_gateway.queries.members import member_list, user_workspaces
from regatta_gateway.workspaces import aggregate as ws
from regatta_gateway.workspaces import appends as workspace_appends
from regatta_shared.ids import run_stream, workspace_stream

from .conftest import ADMIN_TOKEN, Gateway, demo_config, make_settings
from .service_support import Services, refused
from .test_cli_contract import flat_error


def current(gw: Gateway, token: str = ADMIN_TOKEN) -> str:
    """The workspace a request naming none acts in."""
    listed = gw.ok(gw.v1("GET", "/workspaces", token=token))["workspaces"]
    [chosen] = [w["name"] for w in listed if w["current"]]
    [default] = [w["name"] for w in listed if w["default"]]
    assert chosen == default
    return chosen


def user_id(gw: Gateway, token: str) -> str:
    return authenticate(gw.store, f"Bearer {token}").user_id


def test_the_default_workspace_is_the_first_one_given_and_creating_one_moves_nobody(
    gateway: Gateway,
) -> None:
    gateway.workspace("aaa-first-by-name")
    assert current(gateway) == "default"  # the bootstrap admin's: the bootstrap workspace
    gateway.workspace("zeta")
    carol = gateway.member("zeta", "carol@example.com")
    gateway.member("aaa-first-by-name", "carol@example.com")
    assert current(gateway, carol) == "zeta"
    gateway.workspace("0-even-earlier")
    assert current(gateway) == "default" and current(gateway, carol) == "zeta"
    # Requests naming no workspace act there.
    gateway.benchmark("zeta-only", ["t1"], workspace="zeta")
    listed = gateway.ok(gateway.v1("GET", "/benchmarks", token=carol))["benchmarks"]
    assert [b["name"] for b in listed] == ["zeta-only"]


@pytest.fixture
def hosted_gateway(postgres_url: str, nats_url: str, tmp_path: Path) -> Iterator[Gateway]:
    declared = [{"source_type": "folder", "path": "/srv/benchmarks/hosted-one", "name": "hosted-one"}]
    settings = make_settings(postgres_url, nats_url, tmp_path / "data").model_copy(
        update={"hosted_benchmarks": json.dumps(declared)}
    )
    with TestClient(create_app(settings)) as client:
        yield Gateway(client, settings)


def test_hosted_benchmarks_appear_in_every_workspace(hosted_gateway: Gateway) -> None:
    gw = hosted_gateway
    gw.workspace("team-b")

    def listed(workspace: str) -> list[tuple[str, bool]]:
        rows = gw.ok(gw.v1("GET", "/benchmarks", workspace=workspace))["benchmarks"]
        return [(b["name"], b["hosted"]) for b in rows]

    assert listed("default") == [("hosted-one", True)]
    assert listed("team-b") == [("hosted-one", True)]
    # Each workspace's copy is its own: its runs and leaderboard stay the workspace's.
    ids = {
        gw.ok(gw.v1("GET", "/benchmarks", workspace=w))["benchmarks"][0]["id"] for w in ("default", "team-b")
    }
    assert len(ids) == 2


def test_admins_rename_a_workspace_and_names_stay_unique(services: Services) -> None:
    sv = services
    sv.workspace("team-b")
    bob = sv.member("team-b", "bob@example.com")
    renamed = workspace_handlers.rename_workspace(sv.store, sv.scope(workspace="team-b"), {"name": "Team C"})
    sv.settle()
    assert renamed["name"] == "Team C"
    assert "Team C" in [w["name"] for w in user_workspaces(sv.store, sv.user_id(bob))]
    refused(lambda: sv.scope(bob, "team-b"), NotFound)
    bob_in_c = sv.scope(bob, "Team C")
    refused(
        lambda: workspace_handlers.rename_workspace(sv.store, bob_in_c, {"name": "bobs"}),
        Forbidden,
        "FORBIDDEN",
    )
    before = sv.event_count()
    admin_in_c = sv.scope(workspace="Team C")
    refused(
        lambda: workspace_handlers.rename_workspace(sv.store, admin_in_c, {"name": "DEFAULT"}),
        Conflict,
        "CONFLICT",
    )
    for bad in ("", " ", "x" * 201, "tab\there", 7, None):
        error = refused(
            lambda bad=bad: workspace_handlers.rename_workspace(sv.store, admin_in_c, {"name": bad}), Invalid
        )
        assert error.field == "name"
    refused(lambda: sv.scope(workspace="nope"), NotFound)
    assert sv.event_count() == before
    # The old name is free again; the new one is taken.
    sv.workspace("team-b")
    refused(lambda: sv.workspace("team c"), Conflict, "CONFLICT")


def test_deleting_a_workspace_with_runs_asks_for_its_name_and_keeps_the_event_log(gateway: Gateway) -> None:
    gateway.workspace("scratch")
    assert gateway.ok(gateway.v1("DELETE", "/workspaces/scratch"))["deleted"] is True  # no runs: no question

    gateway.workspace("lab")
    bob = gateway.member("lab", "bob@example.com")
    gateway.benchmark("demo", ["t1", "t2"], workspace="lab")
    run_id = gateway.submit(demo_config("demo"), workspace="lab")["id"]
    gateway.settle()
    flat_error(gateway.v1("DELETE", "/workspaces/lab", token=bob), 403, "FORBIDDEN")
    before = gateway.event_count()
    asked = flat_error(gateway.v1("DELETE", "/workspaces/lab"), 409, "CONFIRMATION_REQUIRED")
    assert asked["run_count"] == 1 and asked["field"] == "confirm"
    flat_error(
        gateway.v1("DELETE", "/workspaces/lab", params={"confirm": "LAB"}), 409, "CONFIRMATION_REQUIRED"
    )
    assert gateway.event_count() == before

    deleted = gateway.ok(gateway.v1("DELETE", "/workspaces/lab", params={"confirm": "lab"}))
    assert deleted == {"id": deleted["id"], "name": "lab", "deleted": True, "stopped_runs": 1}
    # Gone from every list and out of reach; everything it recorded is still in the log.
    assert "lab" not in [w["name"] for w in gateway.ok(gateway.v1("GET", "/workspaces"))["workspaces"]]
    flat_error(gateway.v1("GET", "/runs", workspace="lab"), 404, "WORKSPACE_SCOPE_HEADER_ACCESS_DENIED")
    flat_error(gateway.v1("GET", "/runs", token=bob), 404, "WORKSPACE_SCOPE_HEADER_ACCESS_DENIED")
    assert gateway.event_count() > before
    types = [e.type for e in gateway.store.read_stream(workspace_stream(deleted["id"]))]
    assert types[0] == "WorkspaceCreated" and types[-1] == "WorkspaceDeleted"
    assert [e.type for e in gateway.store.read_stream(run_stream(run_id))][:1] == ["RunSubmitted"]
    assert "RunStopRequested" in [e.type for e in gateway.store.read_stream(run_stream(run_id))]
    gateway.client.app.state.ops_projections.catch_up()  # type: ignore[attr-defined]
    audited = {r["kind"] for r in gateway.raw_rows("rm_audit") if r["workspace_id"] == deleted["id"]}
    assert {"WorkspaceCreated", "RunSubmitted", "WorkspaceDeleted"} <= audited
    gateway.workspace("lab")  # the name is free again


def test_admins_remove_members_and_change_roles_and_one_admin_always_remains(services: Services) -> None:
    sv = services
    sv.workspace("team-b")
    bob = sv.member("team-b", "bob@example.com")
    carol = sv.member("team-b", "carol@example.com")
    bob_id, carol_id, admin_id = sv.user_id(bob), sv.user_id(carol), sv.user_id(ADMIN_TOKEN)
    admin, as_bob = sv.scope(workspace="team-b"), sv.scope(bob, "team-b")

    refused(lambda: workspace_handlers.remove_member(sv.store, as_bob, carol_id), Forbidden, "FORBIDDEN")
    body = {"role": "admin"}
    refused(lambda: workspace_handlers.change_role(sv.store, as_bob, bob_id, body), Forbidden)
    for bad in ("owner", None, 1):
        error = refused(
            lambda bad=bad: workspace_handlers.change_role(sv.store, admin, bob_id, {"role": bad}), Invalid
        )
        assert error.field == "role"
    refused(
        lambda: workspace_handlers.change_role(sv.store, admin, "usr_nobody", body), NotFound, "NOT_FOUND"
    )

    changed = workspace_handlers.change_role(sv.store, admin, bob_id, body)
    sv.settle()
    assert changed["role"] == "admin"
    roles = {m["email"]: m["role"] for m in member_list(sv.store, admin.workspace_id)}
    assert roles == {"admin@localhost": "admin", "bob@example.com": "admin", "carol@example.com": "member"}
    # Bob, now admin, removes carol: she loses the workspace at once.
    as_bob = sv.scope(bob, "team-b")
    workspace_handlers.remove_member(sv.store, as_bob, carol_id)
    sv.settle()
    refused(lambda: sv.scope(carol, "team-b"), NotFound)
    # A member may leave; the last admin may neither leave nor step down.
    member_dan = sv.member("team-b", "dan@example.com")
    workspace_handlers.remove_member(sv.store, sv.scope(member_dan, "team-b"), sv.user_id(member_dan))
    workspace_handlers.remove_member(sv.store, as_bob, admin_id)
    sv.settle()
    before = sv.event_count()
    refused(
        lambda: workspace_handlers.change_role(sv.store, as_bob, bob_id, {"role": "member"}),
        Conflict,
        "LAST_ADMIN",
    )
    refused(lambda: workspace_handlers.remove_member(sv.store, as_bob, bob_id), Conflict, "LAST_ADMIN")
    assert sv.event_count() == before
    # Leaving a workspace moves the admin's default nowhere: it was never that one.
    assert [w["name"] for w in user_workspaces(sv.store, admin_id) if w["default"]] == ["default"]


# --- concurrency ----------------------------------------------------------------------------------


def test_a_decision_made_on_a_stale_stream_is_refused_with_409(gateway: Gateway) -> None:
    """The seam itself: decide on a state read before another command appended, then append."""
    gateway.workspace("team-b")
    bob = gateway.member("team-b", "bob@example.com", role="admin")
    store = gateway.store
    admin = resolve_scope(store, authenticate(store, f"Bearer {ADMIN_TOKEN}"), "team-b")
    bob_scope = resolve_scope(store, authenticate(store, f"Bearer {bob}"), "team-b")
    stale = workspace_appends.load(store, admin.workspace_id)

    workspace_handlers.change_role(store, bob_scope, bob_scope.principal.user_id, {"role": "member"})
    before = gateway.event_count()
    with pytest.raises(Conflict) as refused:
        workspace_appends.execute(
            store,
            admin.workspace_id,
            admin.principal.user_id,
            lambda s: ws.decide_change_role(s, admin.principal.user_id, admin.principal.user_id, "member"),
            state=stale,
        )
    assert refused.value.code == "CONCURRENT_CHANGE"
    assert gateway.event_count() == before
    fresh = workspace_appends.load(store, admin.workspace_id)
    assert fresh.admins() == {admin.principal.user_id}

    # A change the decision does not read (a budget) only moves the version: decided again, appended.
    gateway.ok(gateway.v1("PUT", "/workspace/budget", json={"budget_usd": 5}, workspace="team-b"))
    moved = workspace_appends.execute(
        store,
        admin.workspace_id,
        admin.principal.user_id,
        lambda s: ws.decide_rename(s, admin.principal.user_id, "team-b2", {}),
        state=fresh,
    )
    assert [e.type for e in moved] == ["WorkspaceRenamed"]


def race(calls: list[Callable[[], Any]]) -> list[Any]:
    """Runs the calls at once from threads released together; their responses in call order."""
    start = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)

    def one(index: int) -> None:
        start.wait()
        results[index] = calls[index]()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


@pytest.mark.parametrize("round_", range(3))
def test_two_admins_stepping_down_at_once_leave_one_admin_and_get_one_409(
    gateway: Gateway, round_: int
) -> None:
    name = f"pair-{round_}"
    gateway.workspace(name)
    bob = gateway.member(name, "bob@example.com", role="admin")
    ids = {ADMIN_TOKEN: user_id(gateway, ADMIN_TOKEN), bob: user_id(gateway, bob)}
    responses = race(
        [
            lambda token=token: gateway.v1(
                "PATCH", f"/workspaces/{name}/members/{ids[token]}", json={"role": "member"}, token=token
            )
            for token in (ADMIN_TOKEN, bob)
        ]
    )
    assert sorted(r.status_code for r in responses) == [200, 409], [r.text for r in responses]
    loser = next(r for r in responses if r.status_code == 409).json()
    assert loser["code"] in ("CONCURRENT_CHANGE", "LAST_ADMIN") and loser["message"]
    roles = [m["role"] for m in gateway.ok(gateway.v1("GET", f"/workspaces/{name}/members"))["members"]]
    assert sorted(roles) == ["admin", "member"]


def test_two_renames_to_one_name_at_once_give_one_success_and_one_409(gateway: Gateway) -> None:
    gateway.workspace("left")
    gateway.workspace("right")
    responses = race(
        [
            lambda key=key: gateway.v1("PATCH", f"/workspaces/{key}", json={"name": "together"})
            for key in ("left", "right")
        ]
    )
    assert sorted(r.status_code for r in responses) == [200, 409], [r.text for r in responses]
    assert next(r for r in responses if r.status_code == 409).json()["code"] == "CONFLICT"
    names = sorted(w["name"] for w in gateway.ok(gateway.v1("GET", "/workspaces"))["workspaces"])
    assert names.count("together") == 1 and len(names) == 3
