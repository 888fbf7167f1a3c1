"""How a stored event travels on the bus."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from regatta_shared.envelope import StoredEvent


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
    return StoredEvent(
        position=raw["position"],
        event_id=raw["event_id"],
        stream_id=raw["stream_id"],
        version=raw["version"],
        type=raw["type"],
        data=raw["data"],
        metadata=raw["metadata"],
        recorded_at=datetime.fromisoformat(raw["recorded_at"]),
    )
