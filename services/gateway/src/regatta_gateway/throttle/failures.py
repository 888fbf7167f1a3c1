"""Failed authentications, counted per source address and per token prefix.

A leaky bucket per key: every failure adds one, the level drains at `per_second`; at `burst` the key
is refused (429 with Retry-After) until the level drains below it. Only failures fill a bucket, so a
client that makes many good requests is never slowed. A refusal costs no credential check, so an
attacker learns nothing more from it.

The state is per gateway process and bounded: the least recently failing keys are forgotten first.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable


class FailureThrottle:
    def __init__(
        self,
        burst: int,
        per_second: float,
        max_keys: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.burst = burst
        self.per_second = per_second
        self.max_keys = max_keys
        self.clock = clock
        self._levels: OrderedDict[str, tuple[float, float]] = OrderedDict()  # key -> (level, at)

    def _level(self, key: str, now: float) -> float:
        found = self._levels.get(key)
        if found is None:
            return 0.0
        level, at = found
        return max(level - (now - at) * self.per_second, 0.0)

    def retry_after(self, keys: Iterable[str]) -> int | None:
        """Seconds until every key may try again, or None if none of them is throttled."""
        now = self.clock()
        waits = [
            (level - self.burst + 1) / self.per_second
            for key in keys
            if (level := self._level(key, now)) >= self.burst
        ]
        return max(math.ceil(max(waits)), 1) if waits else None

    def record_failure(self, keys: Iterable[str]) -> None:
        now = self.clock()
        for key in keys:
            self._levels[key] = (self._level(key, now) + 1.0, now)
            self._levels.move_to_end(key)
        while len(self._levels) > self.max_keys:
            self._levels.popitem(last=False)
