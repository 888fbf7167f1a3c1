"""Per-process caches of the gateway's reads: data that never changes once stored (a submission, a
synced task list), and serialised responses kept with the read-model version they were made from.

A read model row changes only when the projection applies an event to it, and some rows record the
position of that event. A read of such a row then costs one indexed lookup of the position: the same
position means the same rows, so the body serialised last time is still exact. Decoding, shaping and
encoding a 50-row leaderboard (~80 KB of JSON) was most of a leaderboard read's CPU.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import orjson


def to_json(body: Any) -> bytes:
    return orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS)


class LRU[K: Hashable, V]:
    """A bounded least-recently-used map. Thread-safe: sync routes run on the threadpool."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)


class VersionedBodies:
    """JSON bodies by key, each kept with the read-model version it was made from."""

    def __init__(self, size: int) -> None:
        self._bodies: LRU[Hashable, tuple[int, bytes]] = LRU(size)

    def body(self, key: Hashable, version: int | None, make: Callable[[], Any]) -> bytes:
        """The JSON of `make()`, from the cache when it holds `key` at `version` (None: never cached)."""
        if version is not None:
            found = self._bodies.get(key)
            if found is not None and found[0] == version:
                return found[1]
        body = to_json(make())
        if version is not None:
            self._bodies.put(key, (version, body))
        return body
