"""Identity events: workspaces, users, memberships, API tokens (stream workspace-<id>)."""

from __future__ import annotations

from typing import Literal

from .base import Event


class WorkspaceCreated(Event):
    type_name = "WorkspaceCreated"
    category = "workspace"
    workspace_id: str
    name: str


class UserRegistered(Event):
    type_name = "UserRegistered"
    category = "workspace"
    user_id: str
    email: str
    name: str


class MemberAdded(Event):
    type_name = "MemberAdded"
    category = "workspace"
    workspace_id: str
    user_id: str
    role: Literal["admin", "member"]


class ApiTokenCreated(Event):
    type_name = "ApiTokenCreated"
    category = "workspace"
    token_id: str
    user_id: str
    token_hash: str
    name: str
    expires_at: str | None = None


class ApiTokenRevoked(Event):
    type_name = "ApiTokenRevoked"
    category = "workspace"
    token_id: str


class PlatformAdminGranted(Event):
    """A platform administrator: may issue tokens to any user and name any host path as a source.
    Distinct from a workspace's admin role, which rules only that workspace."""

    type_name = "PlatformAdminGranted"
    category = "workspace"
    user_id: str


class WorkspaceRenamed(Event):
    type_name = "WorkspaceRenamed"
    category = "workspace"
    workspace_id: str
    name: str


class WorkspaceDeleted(Event):
    """The workspace is gone from every member's list; its events (runs, audit) stay in the log."""

    type_name = "WorkspaceDeleted"
    category = "workspace"
    workspace_id: str
    name: str


class MemberRemoved(Event):
    type_name = "MemberRemoved"
    category = "workspace"
    workspace_id: str
    user_id: str


class MemberRoleChanged(Event):
    type_name = "MemberRoleChanged"
    category = "workspace"
    workspace_id: str
    user_id: str
    role: Literal["admin", "member"]
