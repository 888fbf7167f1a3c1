"""Serialised responses of hot reads, kept per process with the read-model version they were made from.

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
from starlette.responses import Response


def to_json(body: Any) -> bytes:
    return orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS)


class JSONBytes(Response):
    """A JSON response whose body is serialised already (the routes' dict goes through pydantic)."""

    media_type = "application/json"


class VersionedBodies:
    """An LRU of (key -> version, JSON body). Thread-safe: sync routes run on the threadpool."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._bodies: OrderedDict[Hashable, tuple[int, bytes]] = OrderedDict()
        self._lock = threading.Lock()

    def body(self, key: Hashable, version: int | None, make: Callable[[], Any]) -> bytes:
        """The JSON of `make()`, from the cache when it holds `key` at `version` (None: never cached)."""
        if version is not None:
            with self._lock:
                found = self._bodies.get(key)
                if found is not None and found[0] == version:
                    self._bodies.move_to_end(key)
                    return found[1]
        body = to_json(make())
        if version is not None:
            with self._lock:
                self._bodies[key] = (version, body)
                self._bodies.move_to_end(key)
                while len(self._bodies) > self.size:
                    self._bodies.popitem(last=False)
        return body
