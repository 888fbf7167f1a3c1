"""A second projection of the gateway: audit trail, budgets, webhooks and their delivery log.

Kept apart from the main read models so it has its own checkpoint; rebuilt by the same command.
"""

from __future__ import annotations

from typing import Any

from regatta_shared.clock import isoformat
from regatta_shared.events import (
    BenchmarkAdded,
    RunSubmitted,
    WebhookDeliveryRecorded,
    WebhookRegistered,
    WebhookRemoved,
    WorkspaceBudgetSet,
    WorkspaceCreated,
)
from regatta_shared.eventstore import StoredEvent
from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Connection,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    delete,
    insert,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB

metadata = MetaData()
Json = JSON().with_variant(JSONB(), "postgresql")

audit = Table(
    "rm_audit",
    metadata,
    Column("position", BigInteger, primary_key=True),
    Column("workspace_id", String(64), index=True),
    Column("actor", String(200)),
    Column("kind", String(100), index=True),
    Column("stream_id", String(200)),
    Column("recorded_at", String(40), index=True),
    Column("summary", Text),
)
stream_owners = Table(
    "rm_stream_owners",
    metadata,
    Column("stream_id", String(200), primary_key=True),
    Column("workspace_id", String(64)),
)
budgets = Table(
    "rm_budgets",
    metadata,
    Column("workspace_id", String(64), primary_key=True),
    Column("budget_usd", Float),
)
webhooks = Table(
    "rm_webhooks",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("workspace_id", String(64), index=True),
    Column("url", Text),
    Column("kinds", Json),
    Column("active", Boolean),
    Column("created_at", String(40)),
)
deliveries = Table(
    "rm_webhook_deliveries",
    metadata,
    Column("position", BigInteger, primary_key=True),
    Column("webhook_id", String(64), index=True),
    Column("notification_id", String(64)),
    Column("kind", String(60)),
    Column("attempt", Integer),
    Column("delivered", Boolean),
    Column("status_code", Integer),
    Column("error", Text),
    Column("retry_in_seconds", Float),
    Column("at", String(40)),
)

OWNING_EVENTS = {RunSubmitted.type_name, BenchmarkAdded.type_name, WorkspaceCreated.type_name}


def _summary(event: StoredEvent) -> str:
    keys = (
        "run_id",
        "benchmark_id",
        "attempt_id",
        "name",
        "reason",
        "outcome",
        "task",
        "url",
        "budget_usd",
        "label",
        "note",
    )
    parts = [f"{k}={str(event.data[k])[:300]}" for k in keys if event.data.get(k) is not None]
    return f"{event.type} " + " ".join(parts)


class OpsReadModels:
    name = "gateway-ops"
    metadata = metadata

    def apply(self, conn: Connection, event: StoredEvent) -> None:
        self.apply_batch(conn, [event])

    def apply_batch(self, conn: Connection, events: list[StoredEvent]) -> None:
        """One owner lookup and one audit insert per batch: every event gets an audit row, so a rebuild
        went at a few thousand events a second one by one. An event that names no workspace belongs
        to its stream's owner, as set by the stream's owning event (possibly earlier in this batch)."""
        unknown = {e.stream_id for e in events if not _declared_workspace(e)}
        owners: dict[str, str] = {}
        if unknown:
            query = select(stream_owners.c.stream_id, stream_owners.c.workspace_id)
            owners = dict(conn.execute(query.where(stream_owners.c.stream_id.in_(unknown))).tuples().all())
        rows = []
        for event in events:
            workspace_id = _declared_workspace(event) or owners.get(event.stream_id)
            if event.type in OWNING_EVENTS and workspace_id:
                _own(conn, event.stream_id, workspace_id)
                owners[event.stream_id] = workspace_id
            rows.append(_audit_row(event, workspace_id))
            handler = _HANDLERS.get(event.type)
            if handler is not None:
                handler(conn, event, event.data)
        if rows:
            conn.execute(insert(audit), rows)


def _declared_workspace(event: StoredEvent) -> str | None:
    found = event.metadata.get("workspace_id") or event.data.get("workspace_id")
    return str(found) if found else None


def _own(conn: Connection, stream_id: str, workspace_id: str) -> None:
    conn.execute(delete(stream_owners).where(stream_owners.c.stream_id == stream_id))
    conn.execute(insert(stream_owners).values(stream_id=stream_id, workspace_id=workspace_id))


def _audit_row(event: StoredEvent, workspace_id: str | None) -> dict[str, Any]:
    return {
        "position": event.position,
        "workspace_id": workspace_id,
        "actor": event.actor or "system",
        "kind": event.type,
        "stream_id": event.stream_id,
        "recorded_at": isoformat(event.recorded_at),
        "summary": _summary(event),
    }


def _budget(conn: Connection, _e: StoredEvent, d: dict[str, Any]) -> None:
    conn.execute(delete(budgets).where(budgets.c.workspace_id == d["workspace_id"]))
    conn.execute(insert(budgets).values(workspace_id=d["workspace_id"], budget_usd=d["budget_usd"]))


def _webhook(conn: Connection, e: StoredEvent, d: dict[str, Any]) -> None:
    conn.execute(
        insert(webhooks).values(
            id=d["webhook_id"],
            workspace_id=d["workspace_id"],
            url=d["url"],
            kinds=d["kinds"],
            active=True,
            created_at=isoformat(e.recorded_at),
        )
    )


def _webhook_removed(conn: Connection, _e: StoredEvent, d: dict[str, Any]) -> None:
    conn.execute(update(webhooks).where(webhooks.c.id == d["webhook_id"]).values(active=False))


def _delivery(conn: Connection, e: StoredEvent, d: dict[str, Any]) -> None:
    conn.execute(
        insert(deliveries).values(
            position=e.position,
            webhook_id=d["webhook_id"],
            notification_id=d["notification_id"],
            kind=d["kind"],
            attempt=d["attempt"],
            delivered=d["delivered"],
            status_code=d.get("status_code"),
            # Older deliveries recorded the receiver's answer; the log shows only its status class.
            error=f"HTTP {d['status_code']}" if d.get("status_code") and d.get("error") else d.get("error"),
            retry_in_seconds=d.get("retry_in_seconds"),
            at=isoformat(e.recorded_at),
        )
    )


_HANDLERS = {
    WorkspaceBudgetSet.type_name: _budget,
    WebhookRegistered.type_name: _webhook,
    WebhookRemoved.type_name: _webhook_removed,
    WebhookDeliveryRecorded.type_name: _delivery,
}
