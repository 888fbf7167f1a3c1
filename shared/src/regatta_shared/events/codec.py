"""How a stored event is read: in its type's current shape (upcast), from the store or from the bus.

Every reader gets stored events through here (the event store's reads, `decode_stored` for the bus),
so no handler ever sees a payload of an older schema version (events/base.py).
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime
from typing import Any

from regatta_shared.events import EVENT_TYPES, SCHEMA_VERSION, upcast
from regatta_shared.events.envelope import StoredEvent


def current_shape(event: StoredEvent) -> StoredEvent:
    """The event with its payload upcast to its type's schema version, and the metadata saying so (so
    upcasting twice, e.g. in the store and again after the bus, changes nothing)."""
    model = EVENT_TYPES.get(event.type)
    if model is None or model.schema_version == 1:  # the common case, and the hot path of every read
        return event
    stored = event.metadata.get(SCHEMA_VERSION, 1)
    if stored >= model.schema_version:
        return event
    return replace(
        event,
        data=upcast(event.type, event.data, stored),
        metadata={**event.metadata, SCHEMA_VERSION: model.schema_version},
    )


def encode_stored(event: StoredEvent) -> bytes:
    return json.dumps(
        {
            "position": event.position,
            "event_id": event.event_id,
            "stream_id": event.stream_id,
            "version": event.version,
            "type": event.type,
            "data": event.data,
            "metadata": event.metadata,
            "recorded_at": event.recorded_at.isoformat(),
        },
        separators=(",", ":"),
    ).encode()


def decode_stored(body: bytes | dict[str, Any]) -> StoredEvent:
    raw = json.loads(body) if isinstance(body, (bytes, str)) else body
    return current_shape(
        StoredEvent(
            position=raw["position"],
            event_id=raw["event_id"],
            stream_id=raw["stream_id"],
            version=raw["version"],
            type=raw["type"],
            data=raw["data"],
            metadata=raw["metadata"],
            recorded_at=datetime.fromisoformat(raw["recorded_at"]),
        )
    )
