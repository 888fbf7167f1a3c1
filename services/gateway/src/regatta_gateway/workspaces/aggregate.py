"""The workspace aggregate: fold a workspace's stream into its state, and decide what a command appends.

Pure functions, no I/O (the handlers in commands/workspace_handlers.py read, decide and append). A decision is
made against the folded stream, never against the read models, and appended with the stream's version
as the expected version: two admins acting at once on the same workspace cannot both pass a check
that only one of them may pass (say, demoting each other, the last two admins).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field

from regatta_shared.events import (
    ApiTokenRevoked,
    Event,
    MemberAdded,
    MemberRemoved,
    MemberRoleChanged,
    PlatformAdminGranted,
    UserRegistered,
    WebhookRegistered,
    WebhookRemoved,
    WorkspaceBudgetSet,
    WorkspaceCreated,
    WorkspaceDeleted,
    WorkspaceRenamed,
)
from regatta_shared.events.aggregates import fold_into
from regatta_shared.events.envelope import StoredEvent, deterministic_id

from regatta_gateway.errors import Conflict, Forbidden, Invalid, NotFound, Refused

ROLES = ("admin", "member")
MAX_NAME = 200


@dataclass
class WorkspaceState:
    workspace_id: str
    version: int = 0
    name: str | None = None
    deleted: bool = False
    members: dict[str, str] = field(default_factory=dict)  # user id -> role
    budget_usd: float | None = None
    webhooks: set[str] = field(default_factory=set)  # the live ones' ids

    @property
    def exists(self) -> bool:
        return self.name is not None and not self.deleted

    def admins(self) -> set[str]:
        return {user for user, role in self.members.items() if role == "admin"}


def fold(workspace_id: str, events: Iterable[StoredEvent]) -> WorkspaceState:
    return fold_into(WorkspaceState(workspace_id), events, _apply)


def _apply(state: WorkspaceState, event: Event) -> None:
    match event:
        case WorkspaceCreated():
            state.name = event.name
        case WorkspaceRenamed():
            state.name = event.name
        case WorkspaceDeleted():
            state.deleted = True
        case MemberAdded() | MemberRoleChanged():
            state.members[event.user_id] = event.role
        case MemberRemoved():
            state.members.pop(event.user_id, None)
        case WorkspaceBudgetSet():
            state.budget_usd = event.budget_usd
        case WebhookRegistered():
            state.webhooks.add(event.webhook_id)
        case WebhookRemoved():
            state.webhooks.discard(event.webhook_id)


def event_id(event: Event) -> str | None:
    """The id of an event that records a fact outside this one stream (a user, a revocation, a platform
    administrator): derived from the fact, so the event store stores it once whichever workspace's
    stream, request or retry appends it. Other events get a random id."""
    match event:
        case UserRegistered():
            return deterministic_id("user", event.email.lower())
        case ApiTokenRevoked():
            return deterministic_id(event.token_id, "revoked")
        case PlatformAdminGranted():
            return deterministic_id(event.user_id, "platform-admin")
    return None


# --- what a decision reads ------------------------------------------------------------------------
# A decision appended at a version the stream has moved past is decided again on the new state when
# nothing it read changed (another request set a budget while this one renames), and refused with a
# 409 naming what changed otherwise. Each `Reads` gives what one decision read, and what to call it.

Reads = Callable[["WorkspaceState"], tuple[str, Hashable]]


def membership(state: WorkspaceState) -> tuple[str, Hashable]:
    """What decisions on the workspace itself and its roles read: its name, whether it lives, every role."""
    return "The workspace or its members", (state.name, state.deleted, tuple(sorted(state.members.items())))


def standing(actor: str) -> Reads:
    """What a decision that needs only the actor's own place in the workspace reads."""
    return lambda state: ("Your membership of the workspace", (state.exists, state.members.get(actor)))


def workspace_names(events: Iterable[tuple[str, dict[str, str]]]) -> dict[str, str]:
    """Every live workspace's name by id, from (type, data) of the naming events in log order."""
    names: dict[str, str] = {}
    for type_name, data in events:
        if type_name in (WorkspaceCreated.type_name, WorkspaceRenamed.type_name):
            names[data["workspace_id"]] = data["name"]
        elif type_name == WorkspaceDeleted.type_name:
            names.pop(data["workspace_id"], None)
    return names


# --- validation -----------------------------------------------------------------------------------


def clean_name(value: object) -> str:
    if not isinstance(value, str) or not value.strip() or len(value.strip()) > MAX_NAME:
        raise Invalid(f"name must be a non-empty string of at most {MAX_NAME} characters", field="name")
    name = value.strip()
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise Invalid("name must not contain control characters", field="name")
    return name


def clean_role(value: object) -> str:
    if value not in ROLES:
        raise Invalid("role must be admin or member", field="role")
    return str(value)


def name_taken(name: str, names: dict[str, str], except_id: str | None = None) -> bool:
    return any(n.lower() == name.lower() and ws != except_id for ws, n in names.items())


# --- decisions ------------------------------------------------------------------------------------


def not_found() -> Refused:
    return NotFound("Workspace not found or not accessible", code="WORKSPACE_SCOPE_HEADER_ACCESS_DENIED")


def require_admin(state: WorkspaceState, actor: str, doing: str) -> None:
    if not state.exists or actor not in state.members:
        raise not_found()
    if state.members[actor] != "admin":
        raise Forbidden(f"Only workspace admins can {doing}", code="FORBIDDEN")


def decide_create(workspace_id: str, name: str, names: dict[str, str], actor: str) -> list[Event]:
    if name_taken(name, names):
        raise Conflict(f"A workspace named {name!r} exists", code="CONFLICT", field="name")
    return [
        WorkspaceCreated(workspace_id=workspace_id, name=name),
        MemberAdded(workspace_id=workspace_id, user_id=actor, role="admin"),
    ]


def decide_rename(state: WorkspaceState, actor: str, name: str, names: dict[str, str]) -> list[Event]:
    require_admin(state, actor, "rename the workspace")
    if name == state.name:
        return []
    if name_taken(name, names, except_id=state.workspace_id):
        raise Conflict(f"A workspace named {name!r} exists", code="CONFLICT", field="name")
    return [WorkspaceRenamed(workspace_id=state.workspace_id, name=name)]


def decide_delete(state: WorkspaceState, actor: str, confirm: str | None, run_count: int) -> list[Event]:
    """A workspace with runs is deleted only when the request repeats its name (`confirm`): its
    results leave every list, though its events stay in the log."""
    require_admin(state, actor, "delete the workspace")
    assert state.name is not None
    if run_count and confirm != state.name:
        raise Conflict(
            f"Workspace {state.name!r} has {run_count} run{'s' if run_count != 1 else ''}; "
            f"repeat its name as confirm to delete it",
            code="CONFIRMATION_REQUIRED",
            field="confirm",
            run_count=run_count,
        )
    return [WorkspaceDeleted(workspace_id=state.workspace_id, name=state.name)]


def decide_remove_member(state: WorkspaceState, actor: str, user_id: str) -> list[Event]:
    """Admins remove anyone; a member may remove themselves (leave). The last admin stays: a
    workspace nobody can administer could not be renamed, deleted or given members again."""
    if actor != user_id:
        require_admin(state, actor, "remove members")
    elif not state.exists or actor not in state.members:
        raise not_found()
    if user_id not in state.members:
        raise NotFound(f"User {user_id!r} is not a member of this workspace", code="NOT_FOUND")
    if state.admins() == {user_id}:
        raise Conflict(
            "The last admin cannot be removed; make another member admin first",
            code="LAST_ADMIN",
            field="user_id",
        )
    return [MemberRemoved(workspace_id=state.workspace_id, user_id=user_id)]


def decide_change_role(state: WorkspaceState, actor: str, user_id: str, role: str) -> list[Event]:
    require_admin(state, actor, "change roles")
    current = state.members.get(user_id)
    if current is None:
        raise NotFound(f"User {user_id!r} is not a member of this workspace", code="NOT_FOUND")
    if current == role:
        return []
    if role != "admin" and state.admins() == {user_id}:
        raise Conflict(
            "The last admin cannot become a member; make another member admin first",
            code="LAST_ADMIN",
            field="role",
        )
    return [MemberRoleChanged(workspace_id=state.workspace_id, user_id=user_id, role=role)]
