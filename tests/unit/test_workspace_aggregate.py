"""The workspace aggregate on its own: what its fold knows and what each decision allows (no store)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from regatta_gateway.errors import Conflict, Forbidden, Invalid, NotFound, Refused
from regatta_gateway.workspaces import aggregate as ws
from regatta_gateway.workspaces import records
from regatta_shared.events import (
    ApiTokenCreated,
    ApiTokenRevoked,
    Event,
    MemberAdded,
    MemberRemoved,
    MemberRoleChanged,
    UserRegistered,
    WebhookRegistered,
    WebhookRemoved,
    WorkspaceBudgetSet,
    WorkspaceCreated,
    WorkspaceDeleted,
    WorkspaceRenamed,
)
from regatta_shared.events.envelope import StoredEvent

WS = "ws_1"


def stream(*payloads: Event) -> list[StoredEvent]:
    return [
        StoredEvent(i, f"e{i}", f"workspace-{WS}", i, p.type_name, p.model_dump(), {}, datetime.now(UTC))
        for i, p in enumerate(payloads, start=1)
    ]


def team(*extra: Event) -> ws.WorkspaceState:
    return ws.fold(
        WS,
        stream(
            WorkspaceCreated(workspace_id=WS, name="team"),
            MemberAdded(workspace_id=WS, user_id="ann", role="admin"),
            MemberAdded(workspace_id=WS, user_id="bob", role="member"),
            ApiTokenCreated(token_id="t", user_id="bob", token_hash="h", name="n"),
            *extra,
        ),
    )


def refused(decide, kind: type[Refused], code: str | None = None) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(kind) as error:
        decide()
    if code:
        assert error.value.code == code


def test_the_fold_knows_name_members_roles_and_version() -> None:
    state = team(
        WorkspaceRenamed(workspace_id=WS, name="crew"),
        MemberRoleChanged(workspace_id=WS, user_id="bob", role="admin"),
        MemberAdded(workspace_id=WS, user_id="cy", role="member"),
        MemberRemoved(workspace_id=WS, user_id="cy"),
    )
    assert (state.name, state.members, state.version, state.exists) == (
        "crew",
        {"ann": "admin", "bob": "admin"},
        8,
        True,
    )
    assert not team(WorkspaceDeleted(workspace_id=WS, name="team")).exists


def test_only_admins_decide_and_a_workspace_keeps_one_admin() -> None:
    state = team()
    refused(lambda: ws.decide_rename(state, "bob", "x", {}), Forbidden, "FORBIDDEN")
    refused(lambda: ws.decide_change_role(state, "bob", "bob", "admin"), Forbidden)
    refused(lambda: ws.decide_remove_member(state, "bob", "ann"), Forbidden)
    refused(lambda: ws.decide_rename(state, "stranger", "x", {}), NotFound)
    refused(lambda: ws.decide_change_role(state, "ann", "ann", "member"), Conflict, "LAST_ADMIN")
    refused(lambda: ws.decide_remove_member(state, "ann", "ann"), Conflict, "LAST_ADMIN")
    assert ws.decide_remove_member(state, "bob", "bob") == [MemberRemoved(workspace_id=WS, user_id="bob")]
    assert ws.decide_change_role(state, "ann", "bob", "member") == []  # already so: nothing to record
    two = team(MemberRoleChanged(workspace_id=WS, user_id="bob", role="admin"))
    assert ws.decide_change_role(two, "bob", "ann", "member")[0].role == "member"


def test_names_are_unique_whatever_the_case_and_free_again_after_a_rename_or_delete() -> None:
    log = [
        ("WorkspaceCreated", {"workspace_id": "a", "name": "Alpha"}),
        ("WorkspaceCreated", {"workspace_id": "b", "name": "beta"}),
        ("WorkspaceRenamed", {"workspace_id": "a", "name": "gamma"}),
        ("WorkspaceDeleted", {"workspace_id": "b", "name": "beta"}),
    ]
    names = ws.workspace_names(log)
    assert names == {"a": "gamma"}
    assert ws.decide_create("c", "alpha", names, "ann")[0] == WorkspaceCreated(workspace_id="c", name="alpha")
    refused(lambda: ws.decide_create("c", "GAMMA", names, "ann"), Conflict, "CONFLICT")
    assert ws.decide_rename(team(), "ann", "Team", {WS: "team"}) == [
        WorkspaceRenamed(workspace_id=WS, name="Team")
    ]


def test_a_workspace_with_runs_is_deleted_only_when_its_name_is_repeated() -> None:
    state = team()
    refused(lambda: ws.decide_delete(state, "ann", None, 3), Conflict, "CONFIRMATION_REQUIRED")
    refused(lambda: ws.decide_delete(state, "ann", "TEAM", 3), Conflict, "CONFIRMATION_REQUIRED")
    assert ws.decide_delete(state, "ann", "team", 3) == [WorkspaceDeleted(workspace_id=WS, name="team")]
    assert ws.decide_delete(state, "ann", None, 0) == [WorkspaceDeleted(workspace_id=WS, name="team")]
    deleted = team(WorkspaceDeleted(workspace_id=WS, name="team"))
    refused(lambda: ws.decide_delete(deleted, "ann", "team", 0), NotFound)


@pytest.mark.parametrize("name", ["", "  ", "x" * 201, "a\nb", "\x7f", 3, None, ["team"]])
def test_bad_names_are_refused_naming_the_field(name: object) -> None:
    with pytest.raises(Invalid) as error:
        ws.clean_name(name)
    assert error.value.field == "name"


def test_the_fold_knows_the_budget_and_the_live_webhooks() -> None:
    state = team(
        WorkspaceBudgetSet(workspace_id=WS, budget_usd=5.0),
        WebhookRegistered(webhook_id="wh_1", workspace_id=WS, url="http://x", kinds=[]),
        WebhookRegistered(webhook_id="wh_2", workspace_id=WS, url="http://y", kinds=[]),
        WebhookRemoved(webhook_id="wh_1", workspace_id=WS),
    )
    assert (state.budget_usd, state.webhooks) == (5.0, {"wh_2"})
    refused(lambda: records.decide_remove_webhook(state, "ann", "wh_1"), NotFound, "NOT_FOUND")
    refused(lambda: records.decide_set_budget(state, "bob", 1.0), Forbidden, "FORBIDDEN")
    assert records.decide_remove_webhook(state, "ann", "wh_2") == [
        WebhookRemoved(webhook_id="wh_2", workspace_id=WS)
    ]


def test_adding_a_member_again_records_nothing_or_a_role_change_that_keeps_one_admin() -> None:
    state = team()
    again = MemberAdded(workspace_id=WS, user_id="bob", role="member")
    assert records.decide_add_member(state, "ann", again) == []
    demoted = MemberAdded(workspace_id=WS, user_id="ann", role="member")
    refused(lambda: records.decide_add_member(state, "ann", demoted), Conflict, "LAST_ADMIN")
    refused(lambda: records.decide_add_member(state, "bob", again), Forbidden, "FORBIDDEN")
    refused(lambda: records.decide_create_token(state, "stranger", token()), NotFound)
    promoted = MemberAdded(workspace_id=WS, user_id="bob", role="admin")
    assert records.decide_add_member(state, "ann", promoted, token=token()) == [promoted, token()]


def test_what_a_decision_reads_changes_only_with_what_it_decided_on() -> None:
    before = team()
    budget = team(WorkspaceBudgetSet(workspace_id=WS, budget_usd=1.0))
    joined = team(MemberAdded(workspace_id=WS, user_id="cy", role="member"))
    assert records.member_reads("ann", "dan")(joined) == records.member_reads("ann", "dan")(before)
    assert records.member_reads("ann", "cy")(joined) != records.member_reads("ann", "cy")(before)
    assert records.budget_reads("ann")(budget) != records.budget_reads("ann")(before)
    assert ws.standing("bob")(budget) == ws.standing("bob")(joined) == ws.standing("bob")(before)


def test_facts_beyond_one_stream_get_event_ids_derived_from_them() -> None:
    """So the store keeps each once whichever workspace's stream, request or retry appends it."""
    first = UserRegistered(user_id="u", email="Dana@X.example", name="d")
    assert ws.event_id(first) == ws.event_id(first.model_copy(update={"email": "dana@x.example"}))
    assert ws.event_id(ApiTokenRevoked(token_id="t")) == ws.event_id(ApiTokenRevoked(token_id="t"))
    assert ws.event_id(ApiTokenRevoked(token_id="t")) != ws.event_id(ApiTokenRevoked(token_id="u"))
    assert ws.event_id(WorkspaceBudgetSet(workspace_id=WS, budget_usd=1.0)) is None


def token() -> ApiTokenCreated:
    return ApiTokenCreated(token_id="tok", user_id="bob", token_hash="h2", name="issued")
