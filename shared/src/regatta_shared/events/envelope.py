"""The envelope of an event: what the store keeps around a payload."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from regatta_shared.events import SCHEMA_VERSION, Event, parse_event


@dataclass(frozen=True)
class NewEvent:
    event_id: str
    type: str
    data: dict[str, Any]
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StoredEvent:
    position: int
    event_id: str
    stream_id: str
    version: int
    type: str
    data: dict[str, Any]
    metadata: dict[str, Any]
    recorded_at: datetime

    def payload(self) -> Event:
        return parse_event(self.type, self.data)

    @property
    def actor(self) -> str | None:
        return self.metadata.get("actor")


def new_event(
    payload: Event,
    *,
    event_id: str | None = None,
    actor: str | None = None,
    workspace_id: str | None = None,
    causation_id: str | None = None,
) -> NewEvent:
    """Wrap a payload. Callers pass a deterministic event_id when a retry must not append twice."""
    metadata: dict[str, Any] = {}
    if actor:
        metadata["actor"] = actor
    if workspace_id:
        metadata["workspace_id"] = workspace_id
    if causation_id:
        metadata["causation_id"] = causation_id
    if payload.schema_version > 1:  # absent means 1, so events of unversioned types stay as they were
        metadata[SCHEMA_VERSION] = payload.schema_version
    return NewEvent(
        event_id=event_id or str(uuid.uuid4()),
        type=payload.type_name,
        data=payload.model_dump(mode="json"),
        metadata=metadata,
    )


def deterministic_id(*parts: str) -> str:
    """An event id derived from what caused the event, so redelivered commands dedupe in the store."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "regatta:" + ":".join(parts)))
