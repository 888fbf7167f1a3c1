"""Workspace events: secrets (names only, never values), budget (stream workspace-<id>), webhooks and
their deliveries (stream webhook-<id>)."""

from __future__ import annotations

from typing import Literal

from .base import Event


class SecretSet(Event):
    type_name = "SecretSet"
    category = "workspace"
    secret_id: str
    workspace_id: str
    name: str
    scope: Literal["workspace", "user"]
    owner_user_id: str | None = None


class SecretDeleted(Event):
    type_name = "SecretDeleted"
    category = "workspace"
    secret_id: str
    workspace_id: str
    name: str
    scope: Literal["workspace", "user"]


class WorkspaceBudgetSet(Event):
    type_name = "WorkspaceBudgetSet"
    category = "workspace"
    workspace_id: str
    budget_usd: float | None


class WebhookRegistered(Event):
    type_name = "WebhookRegistered"
    category = "workspace"
    webhook_id: str
    workspace_id: str
    url: str
    kinds: list[str]


class WebhookRemoved(Event):
    type_name = "WebhookRemoved"
    category = "workspace"
    webhook_id: str
    workspace_id: str


class WebhookDeliveryRecorded(Event):
    """One delivery attempt of one notification; the delivery log is the fold of these."""

    type_name = "WebhookDeliveryRecorded"
    category = "webhook"
    webhook_id: str
    workspace_id: str
    notification_id: str
    kind: str
    attempt: int
    delivered: bool
    status_code: int | None = None
    error: str | None = None
    retry_in_seconds: float | None = None
