"""Tables of the event store: the log itself and the checkpoints of its readers."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    DateTime,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    UniqueConstraint,
)
from sqlalchemy.dialects.postgresql import JSONB

metadata = MetaData()

Json = JSON().with_variant(JSONB(), "postgresql")
Position = BigInteger().with_variant(Integer(), "sqlite")

events = Table(
    "events",
    metadata,
    Column("position", Position, primary_key=True, autoincrement=True),
    Column("event_id", String(64), nullable=False),
    Column("stream_id", String(200), nullable=False),
    Column("version", Integer, nullable=False),
    Column("type", String(100), nullable=False),
    Column("data", Json, nullable=False),
    Column("metadata", Json, nullable=False),
    Column("recorded_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("event_id", name="uq_events_event_id"),
    UniqueConstraint("stream_id", "version", name="uq_events_stream_version"),
)
Index("ix_events_type_position", events.c.type, events.c.position)

checkpoints = Table(
    "checkpoints",
    metadata,
    Column("name", String(100), primary_key=True),
    Column("position", BigInteger, nullable=False),
)

# Events the relay could not publish (larger than the bus delivers) and stepped past, so one event can
# never stop the log; operators see them here, in the relay's ERROR log line and in the ops health.
relay_set_aside = Table(
    "relay_set_aside",
    metadata,
    Column("position", Position, primary_key=True, autoincrement=False),
    Column("event_id", String(64), nullable=False),
    Column("stream_id", String(200), nullable=False),
    Column("type", String(100), nullable=False),
    Column("size", BigInteger, nullable=False),
    Column("reason", String(500), nullable=False),
    Column("set_aside_at", DateTime(timezone=True), nullable=False),
)
