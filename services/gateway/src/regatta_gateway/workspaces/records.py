"""Decisions on what a workspace records for its members: who joins, their API tokens and secrets, its
budget, its webhooks, platform administrators. Pure, like aggregate.py, whose state they decide on; the
handlers (commands/identity.py, notifications/registry.py, secrets/store.py) append what they return through
appends.execute.

Each comes with what it reads (workspace.Reads), so two requests conflict only when one changed what
the other decided on: two admins adding the same person at once get one success and one 409, two adding
different people both succeed.
"""

from __future__ import annotations

from regatta_shared.events import (
    ApiTokenCreated,
    ApiTokenRevoked,
    Event,
    MemberAdded,
    PlatformAdminGranted,
    SecretDeleted,
    SecretSet,
    UserRegistered,
    WebhookRegistered,
    WebhookRemoved,
    WorkspaceBudgetSet,
)

from regatta_gateway.errors import Conflict, NotFound
from regatta_gateway.workspaces.aggregate import Reads, WorkspaceState, not_found, require_admin


def _require_member(state: WorkspaceState, actor: str) -> None:
    if not state.exists or actor not in state.members:
        raise not_found()


# --- members --------------------------------------------------------------------------------------


def member_reads(actor: str, user_id: str) -> Reads:
    return lambda state: (
        f"The membership of {user_id!r}",
        (state.exists, state.members.get(actor), state.members.get(user_id)),
    )


def decide_add_member(
    state: WorkspaceState,
    actor: str,
    added: MemberAdded,
    registered: UserRegistered | None = None,
    token: ApiTokenCreated | None = None,
) -> list[Event]:
    """A member joins, recorded with the user, if new, and a token issued to them, if asked for: one
    append, so no member is left without the token the response promised, nor a token without its
    member. Adding a member again records nothing unless it changes their role, which obeys the rule
    of a role change: the last admin stays one."""
    require_admin(state, actor, "add members")
    current = state.members.get(added.user_id)
    if current == added.role:
        joined: list[Event] = []
    elif current == "admin" and state.admins() == {added.user_id}:
        raise Conflict(
            "The last admin cannot become a member; make another member admin first",
            code="LAST_ADMIN",
            field="role",
        )
    else:
        joined = [added]
    return [e for e in (registered, *joined, token) if e is not None]


# --- tokens ---------------------------------------------------------------------------------------


def decide_create_token(state: WorkspaceState, actor: str, created: ApiTokenCreated) -> list[Event]:
    """A member's own token, recorded in the workspace they asked in (tokens act in every workspace
    their user belongs to; this one's stream keeps the audit entry)."""
    _require_member(state, actor)
    return [created]


def decide_revoke_token(state: WorkspaceState, actor: str, token_id: str) -> list[Event]:
    """Recorded in the workspace asked in, whichever one's stream holds the token: the revocation's
    event id is the token's (workspace.event_id), so revoking twice, or from two workspaces at once,
    stores it once. That the token is the actor's own is checked by the handler, across workspaces."""
    _require_member(state, actor)
    return [ApiTokenRevoked(token_id=token_id)]


def decide_grant_platform_admin(state: WorkspaceState, actor: str, user_id: str) -> list[Event]:
    _require_member(state, actor)
    return [PlatformAdminGranted(user_id=user_id)]


def decide_secret(state: WorkspaceState, actor: str, recorded: SecretSet | SecretDeleted) -> list[Event]:
    """A secret's name set or deleted (its value's row is written by the handler in the transaction that
    appends this). Who may write which scope is the handler's check, on the request's scope."""
    _require_member(state, actor)
    return [recorded]


# --- budget and webhooks --------------------------------------------------------------------------


def budget_reads(actor: str) -> Reads:
    return lambda state: ("The workspace budget", (state.exists, state.members.get(actor), state.budget_usd))


def decide_set_budget(state: WorkspaceState, actor: str, budget_usd: float | None) -> list[Event]:
    require_admin(state, actor, "change this")
    return [WorkspaceBudgetSet(workspace_id=state.workspace_id, budget_usd=budget_usd)]


def webhook_reads(actor: str, webhook_id: str) -> Reads:
    return lambda state: (
        f"Webhook {webhook_id!r}",
        (state.exists, state.members.get(actor), webhook_id in state.webhooks),
    )


def decide_register_webhook(state: WorkspaceState, actor: str, registered: WebhookRegistered) -> list[Event]:
    require_admin(state, actor, "change this")
    return [registered]


def decide_remove_webhook(state: WorkspaceState, actor: str, webhook_id: str) -> list[Event]:
    require_admin(state, actor, "change this")
    if webhook_id not in state.webhooks:
        raise NotFound(f"Webhook {webhook_id!r} not found", code="NOT_FOUND")
    return [WebhookRemoved(webhook_id=webhook_id, workspace_id=state.workspace_id)]
