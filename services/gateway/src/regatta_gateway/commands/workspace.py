"""The workspace aggregate: fold a workspace's stream into its state, and decide what a command appends.

Pure functions, no I/O (the handlers in workspace_handlers.py read, decide and append). A decision is
made against the folded stream, never against the read models, and appended with the stream's version
as the expected version: two admins acting at once on the same workspace cannot both pass a check
that only one of them may pass (say, demoting each other, the last two admins).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from regatta_shared.envelope import StoredEvent
from regatta_shared.events import (
    Event,
    MemberAdded,
    MemberRemoved,
    MemberRoleChanged,
    WorkspaceCreated,
    WorkspaceDeleted,
    WorkspaceRenamed,
)

from regatta_gateway.http.errors import ApiError

ROLES = ("admin", "member")
MAX_NAME = 200


@dataclass
class WorkspaceState:
    workspace_id: str
    version: int = 0
    name: str | None = None
    deleted: bool = False
    members: dict[str, str] = field(default_factory=dict)  # user id -> role

    @property
    def exists(self) -> bool:
        return self.name is not None and not self.deleted

    def admins(self) -> set[str]:
        return {user for user, role in self.members.items() if role == "admin"}


def fold(workspace_id: str, events: Iterable[StoredEvent]) -> WorkspaceState:
    state = WorkspaceState(workspace_id)
    for stored in events:
        state.version = stored.version
        _apply(state, stored.payload())
    return state


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
        raise ApiError(400, f"name must be a non-empty string of at most {MAX_NAME} characters", field="name")
    name = value.strip()
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise ApiError(400, "name must not contain control characters", field="name")
    return name


def clean_role(value: object) -> str:
    if value not in ROLES:
        raise ApiError(400, "role must be admin or member", field="role")
    return str(value)


def name_taken(name: str, names: dict[str, str], except_id: str | None = None) -> bool:
    return any(n.lower() == name.lower() and ws != except_id for ws, n in names.items())


# --- decisions ------------------------------------------------------------------------------------


def _not_found() -> ApiError:
    return ApiError(404, "Workspace not found or not accessible", code="WORKSPACE_SCOPE_HEADER_ACCESS_DENIED")


def _require_admin(state: WorkspaceState, actor: str, doing: str) -> None:
    if not state.exists or actor not in state.members:
        raise _not_found()
    if state.members[actor] != "admin":
        raise ApiError(403, f"Only workspace admins can {doing}", code="FORBIDDEN")


def decide_create(workspace_id: str, name: str, names: dict[str, str], actor: str) -> list[Event]:
    if name_taken(name, names):
        raise ApiError(409, f"A workspace named {name!r} exists", code="CONFLICT", field="name")
    return [
        WorkspaceCreated(workspace_id=workspace_id, name=name),
        MemberAdded(workspace_id=workspace_id, user_id=actor, role="admin"),
    ]


def decide_rename(state: WorkspaceState, actor: str, name: str, names: dict[str, str]) -> list[Event]:
    _require_admin(state, actor, "rename the workspace")
    if name == state.name:
        return []
    if name_taken(name, names, except_id=state.workspace_id):
        raise ApiError(409, f"A workspace named {name!r} exists", code="CONFLICT", field="name")
    return [WorkspaceRenamed(workspace_id=state.workspace_id, name=name)]


def decide_delete(state: WorkspaceState, actor: str, confirm: str | None, run_count: int) -> list[Event]:
    """A workspace with runs is deleted only when the request repeats its name (`confirm`): its
    results leave every list, though its events stay in the log."""
    _require_admin(state, actor, "delete the workspace")
    assert state.name is not None
    if run_count and confirm != state.name:
        raise ApiError(
            409,
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
        _require_admin(state, actor, "remove members")
    elif not state.exists or actor not in state.members:
        raise _not_found()
    if user_id not in state.members:
        raise ApiError(404, f"User {user_id!r} is not a member of this workspace", code="NOT_FOUND")
    if state.admins() == {user_id}:
        raise ApiError(
            409,
            "The last admin cannot be removed; make another member admin first",
            code="LAST_ADMIN",
            field="user_id",
        )
    return [MemberRemoved(workspace_id=state.workspace_id, user_id=user_id)]


def decide_change_role(state: WorkspaceState, actor: str, user_id: str, role: str) -> list[Event]:
    _require_admin(state, actor, "change roles")
    current = state.members.get(user_id)
    if current is None:
        raise ApiError(404, f"User {user_id!r} is not a member of this workspace", code="NOT_FOUND")
    if current == role:
        return []
    if role != "admin" and state.admins() == {user_id}:
        raise ApiError(
            409,
            "The last admin cannot become a member; make another member admin first",
            code="LAST_ADMIN",
            field="role",
        )
    return [MemberRoleChanged(workspace_id=state.workspace_id, user_id=user_id, role=role)]
