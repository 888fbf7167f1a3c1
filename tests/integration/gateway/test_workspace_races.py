"""Members, tokens, budgets and webhooks are decided on the workspace's stream and appended at the
version read, like the workspace's own commands (test_workspace_admin.py): two requests that decide on
the same state conflict only when one changes what the other read, and then one gets a 409 that names it.

Each race holds both requests' first append until both have decided, so the version check, not the
scheduling of two threads, settles it: without that, one request may finish before the other reads and
the two never race at all.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from regatta_gateway.app import create_app
from regatta_shared.eventstore import EventStore
from regatta_shared.ids import workspace_stream

from .conftest import Gateway, make_settings
from .test_workspace_admin import race


@pytest.fixture
def gateway(database_url: str, nats_url: str, tmp_path: Path) -> Iterator[Gateway]:
    """On SQLite and Postgres, with webhooks allowed to 127.0.0.1:9 only (nothing listens there)."""
    settings = make_settings(database_url, nats_url, tmp_path / "data")
    settings = settings.model_copy(update={"outbound_allow": "127.0.0.1:9"})
    with TestClient(create_app(settings)) as client:
        yield Gateway(client, settings)


def held_together(monkeypatch: pytest.MonkeyPatch, store: EventStore, parties: int = 2) -> None:
    """The first `parties` appends wait for each other, then run (the real append, in full)."""
    barrier = threading.Barrier(parties, timeout=30)
    calls = iter(range(parties))
    lock = threading.Lock()
    append = store.append

    def held(*args: Any, **kwargs: Any) -> Any:
        with lock:
            first = next(calls, None) is not None
        if first:
            barrier.wait()
        return append(*args, **kwargs)

    monkeypatch.setattr(store, "append", held)


def at_once(gw: Gateway, monkeypatch: pytest.MonkeyPatch, calls: list[Callable[[], Any]]) -> list[Any]:
    held_together(monkeypatch, gw.store, len(calls))
    responses = race(calls)
    monkeypatch.undo()
    return responses


def workspace_events(gw: Gateway, name: str, kind: str) -> list[dict[str, Any]]:
    workspace_id = next(
        w["id"] for w in gw.ok(gw.v1("GET", "/workspaces"))["workspaces"] if w["name"] == name
    )
    return [e.data for e in gw.store.read_stream(workspace_stream(workspace_id)) if e.type == kind]


def test_adding_one_person_twice_at_once_gives_one_201_and_one_409(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    gw = gateway
    gw.workspace("crew")
    body = {"email": "dana@example.com", "role": "member", "issue_token": True}
    add = lambda: gw.v1("POST", "/workspaces/crew/members", json=body)  # noqa: E731
    responses = at_once(gw, monkeypatch, [add, add])
    assert sorted(r.status_code for r in responses) == [201, 409], [r.text for r in responses]
    loser = next(r for r in responses if r.status_code == 409).json()
    assert loser["code"] == "CONCURRENT_CHANGE" and "membership" in loser["message"]
    # The loser recorded nothing: one member, one token, one user.
    assert len(workspace_events(gw, "crew", "MemberAdded")) == 2  # the creator and dana
    assert len(workspace_events(gw, "crew", "ApiTokenCreated")) == 1
    members = gw.ok(gw.v1("GET", "/workspaces/crew/members"))["members"]
    assert sorted(m["email"] for m in members) == ["admin@localhost", "dana@example.com"]


def test_adding_two_people_at_once_adds_both(gateway: Gateway, monkeypatch: pytest.MonkeyPatch) -> None:
    gw = gateway
    gw.workspace("crew")
    responses = at_once(
        gw,
        monkeypatch,
        [
            lambda email=email: gw.v1("POST", "/workspaces/crew/members", json={"email": email})
            for email in ("eve@example.com", "finn@example.com")
        ],
    )
    assert [r.status_code for r in responses] == [201, 201], [r.text for r in responses]
    assert len(gw.ok(gw.v1("GET", "/workspaces/crew/members"))["members"]) == 3


def test_adding_the_last_admin_again_as_a_member_is_refused(gateway: Gateway) -> None:
    """POST /members with an admin's email must not demote the last admin where PATCH may not."""
    gw = gateway
    gw.workspace("solo")
    refused = gw.v1("POST", "/workspaces/solo/members", json={"email": "admin@localhost", "role": "member"})
    assert refused.status_code == 409 and refused.json()["code"] == "LAST_ADMIN"
    again = gw.v1("POST", "/workspaces/solo/members", json={"email": "admin@localhost", "role": "admin"})
    assert again.status_code == 201
    assert len(workspace_events(gw, "solo", "MemberAdded")) == 1  # the same role again: nothing recorded


def test_setting_the_budget_twice_at_once_gives_one_200_and_one_409(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    gw = gateway
    responses = at_once(
        gw,
        monkeypatch,
        [
            lambda usd=usd: gw.v1("PUT", "/workspace/budget", json={"budget_usd": usd}, workspace="default")
            for usd in (10, 20)
        ],
    )
    assert sorted(r.status_code for r in responses) == [200, 409], [r.text for r in responses]
    winner = next(r for r in responses if r.status_code == 200).json()["budget_usd"]
    loser = next(r for r in responses if r.status_code == 409).json()
    assert loser["code"] == "CONCURRENT_CHANGE" and "budget" in loser["message"]
    assert gw.ok(gw.v1("GET", "/workspace/budget", workspace="default"))["budget_usd"] == winner
    assert [e["budget_usd"] for e in workspace_events(gw, "default", "WorkspaceBudgetSet")] == [winner]


def test_removing_a_webhook_twice_at_once_gives_one_204_and_one_409(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    gw = gateway
    body = {"url": "http://127.0.0.1:9/hook", "kinds": ["run.finished"]}
    hook = gw.ok(gw.v1("POST", "/webhooks", json=body, workspace="default"), 201)["id"]
    remove = lambda: gw.v1("DELETE", f"/webhooks/{hook}", workspace="default")  # noqa: E731
    responses = at_once(gw, monkeypatch, [remove, remove])
    assert sorted(r.status_code for r in responses) == [204, 409], [r.text for r in responses]
    loser = next(r for r in responses if r.status_code == 409).json()
    assert loser["code"] == "CONCURRENT_CHANGE" and hook in loser["message"]
    assert len(workspace_events(gw, "default", "WebhookRemoved")) == 1
    assert gw.v1("DELETE", f"/webhooks/{hook}", workspace="default").status_code == 404


def test_what_no_decision_reads_never_conflicts(gateway: Gateway, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two tokens, two webhooks, a token beside a budget: each only moves the version the other read."""
    gw = gateway
    responses = at_once(
        gw,
        monkeypatch,
        [
            lambda: gw.v1("POST", "/tokens", json={"name": "one"}, workspace="default"),
            lambda: gw.v1("POST", "/tokens", json={"name": "two"}, workspace="default"),
            lambda: gw.v1("PUT", "/workspace/budget", json={"budget_usd": 3}, workspace="default"),
            lambda: gw.v1("POST", "/webhooks", json={"url": "http://127.0.0.1:9/a"}, workspace="default"),
        ],
    )
    assert [r.status_code for r in responses] == [201, 201, 200, 201], [r.text for r in responses]
    token = responses[0].json()
    revoke = lambda: gw.v1("DELETE", f"/tokens/{token['id']}", workspace="default")  # noqa: E731
    assert [r.status_code for r in at_once(gw, monkeypatch, [revoke, revoke])] == [204, 204]
    # Its event id is the token's: one revocation stored, whichever request stored it.
    assert len(workspace_events(gw, "default", "ApiTokenRevoked")) == 1
    assert gw.v1("GET", "/tokens", token=token["token"]).status_code == 401
