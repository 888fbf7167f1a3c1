"""How large an event may be: what NATS can deliver, checked before the append that would record it.

An event the relay cannot publish (bigger than the server's max_payload) would otherwise sit in the
log and be set aside by the relay (relay.py), so no subscriber ever sees it. A writer that knows the
limit (the gateway, which answers a hostile request) refuses the append instead, naming the field
that made the event too large.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from regatta_shared.events.envelope import NewEvent

from .appends import dumps

# What the bus envelope adds around data and metadata (codec.encode_stored): ids, stream, type, time.
ENVELOPE_BYTES = 1024


class EventTooLarge(Exception):
    def __init__(self, event_type: str, field: str, size: int, limit: int) -> None:
        super().__init__(f"{event_type} would be {size} bytes, more than the bus delivers ({limit})")
        self.event_type = event_type
        self.field = field
        self.size = size
        self.limit = limit


def encoded_size(event: NewEvent) -> int:
    return len(dumps(event.data).encode()) + len(dumps(event.metadata).encode()) + ENVELOPE_BYTES


def check_sizes(new_events: Sequence[NewEvent], limit: int) -> None:
    """Raise EventTooLarge for the first event over `limit`, naming the field that makes it so."""
    for event in new_events:
        size = encoded_size(event)
        if size > limit:
            raise EventTooLarge(event.type, largest_field(event.data), size, limit)


def largest_field(data: dict[str, Any]) -> str:
    """The dotted path to the largest leaf, descending into the largest child at every level."""
    path: list[str] = []
    value: Any = data
    while isinstance(value, dict | list) and value:
        items = value.items() if isinstance(value, dict) else enumerate(value)
        key, value = max(items, key=lambda item: len(dumps(item[1])))
        path.append(str(key))
    return ".".join(path) or "(body)"
