"""Folding a stream into an aggregate's state: the one loop every aggregate (a run, a benchmark, a
workspace) is folded by. Pure; no I/O.

The state's `version` ends at the last event's: its decisions are appended with it as the expected
version, so a decision made on a state another writer has since moved past is refused by the store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from regatta_shared.events import Event
from regatta_shared.events.envelope import StoredEvent


class Versioned(Protocol):
    version: int


def fold_into[State: Versioned](
    state: State, events: Iterable[StoredEvent], apply: Callable[[State, Event], None]
) -> State:
    """`state` with `events` applied in stream order (events it already holds must not be among them)."""
    for stored in events:
        state.version = stored.version
        apply(state, stored.payload())
    return state
