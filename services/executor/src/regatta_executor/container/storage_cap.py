"""The cap of a container's writable layer where the engine cannot enforce one (overlay2 without
project quotas ignores `storage_opt`): measured instead, and the container killed once it is over.

Why: nothing else stops an agent from filling the engine's disk, which every other attempt on the
host shares. The engine's own measure of the layer (`SizeRw` of an inspect with size=True) is read
while the agent phase runs (every 0.1 s while a command of the agent runs, every second between its
commands; longer when a measure takes long, since the engine walks the layer for it), and once more
when the agent phase ends. While the layer grows fast enough to reach the cap before the next measure,
it is measured sooner, back to back if need be (`next_interval`): the cost share gives way to the cap.
Over the cap, the container is killed (pid 1 with it: nothing in the container can survive or delay
that, unlike a kill run by a shell inside it), and the attempt ends `failed` "storage limit exceeded
(N MiB > M MiB)" (sandbox_faults.StorageLimitExceededError). What can pass the cap is what is written
between the last measure and the kill: on this 2-core test host typically under 30 MiB, up to about
130 MiB when the agent's writers starve the executor of CPU (measures late, a slow kill); a `fallocate`
is instant and passes it by its size. Only the engine's quota (overlay2 on xfs with pquota) holds the
layer to the cap itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator

import docker
from docker.errors import APIError, DockerException, NotFound
from requests import RequestException

from regatta_executor.container import execs
from regatta_executor.sandbox_faults import StorageLimitExceededError

_MIB = 1024 * 1024
# While a command of the agent runs, and between its commands (a process it left may still write;
# most of a model-driven agent's time is spent waiting for the model).
BUSY_INTERVAL_SEC = 0.1
IDLE_INTERVAL_SEC = 1.0
MAX_INTERVAL_SEC = 5.0
# The shortest wait between two measures of a layer growing towards its cap.
MIN_INTERVAL_SEC = 0.01
# The share of the engine's time a measure may take: a layer that takes 20 ms to walk is measured
# every 0.2 s at most, one of 200 ms (a layer of many thousand files) every 2 s.
COST_SHARE = 0.1
# While a command of the agent runs, the layer is taken to grow at least this fast: a writer that
# starts between two measures is seen before it passes the cap by more than a short burst, where a
# measured growth of 0 (the layer idle at the last two measures) would wait out the whole interval.
# Only a layer within about 200 MiB of its cap is measured more often for it.
BUSY_GROWTH_FLOOR = 1024 * _MIB

log = logging.getLogger("regatta.executor")


def next_interval(base: float, took: float, headroom: int, growth: float) -> float:
    """Seconds to the next measure: `base` (or more, for a layer that is costly to measure) unless the
    layer, growing by `growth` bytes a second, would pass the cap (`headroom` bytes away) before then;
    then half the time it needs to get there, however costly the measure."""
    relaxed = min(MAX_INTERVAL_SEC, max(base, took / COST_SHARE))
    if growth <= 0:
        return relaxed
    to_cap = max(headroom, 0) / growth
    return max(MIN_INTERVAL_SEC, min(relaxed, to_cap / 2))


def layer_bytes(api: docker.APIClient, container: str) -> int:
    """The engine's size of the container's writable layer (the SDK's inspect cannot ask for it)."""
    response = api._get(api._url("/containers/{0}/json", container), params={"size": 1})
    return int(api._result(response, json=True).get("SizeRw") or 0)


class StorageCap:
    def __init__(self, api: docker.APIClient, container: str, cap_mb: int) -> None:
        self.api = api
        self.container = container
        self.cap_mb = cap_mb
        self.measured: int | None = None  # the size that was over the cap, once it was
        self._task: asyncio.Task[None] | None = None
        self._commands = 0
        self._woken = asyncio.Event()

    @contextlib.contextmanager
    def command(self) -> Iterator[None]:
        """Around each command of the agent: measured more often while one runs."""
        self._commands += 1
        self._woken.set()
        try:
            yield
        finally:
            self._commands -= 1

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._watch(), name=f"storage-cap-{self.container[:12]}")

    async def stop(self) -> None:
        if self._task is not None:
            task, self._task = self._task, None
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    @property
    def exceeded(self) -> bool:
        return self.measured is not None

    def error(self) -> StorageLimitExceededError:
        size = -(-(self.measured or 0) // _MIB)  # rounded up: a layer over the cap never reads as it
        return StorageLimitExceededError(f"storage limit exceeded ({size} MiB > {self.cap_mb} MiB)")

    def raise_if_exceeded(self) -> None:
        if self.exceeded:
            raise self.error()

    async def check(self, allowance: int = 0) -> None:
        """Measure now (the agent phase's end); kill and raise if over the cap. `allowance`: bytes the
        platform wrote into the layer since the agent's processes ended (the verifier's files), not
        the agent's."""
        if not self.exceeded:
            await self._measure(allowance)
        self.raise_if_exceeded()

    async def _watch(self) -> None:
        last: tuple[float, int] | None = None
        while not self.exceeded:
            started = time.monotonic()
            try:
                size = await self._measure()
            except (DockerException, RequestException) as exc:
                # The container is gone or going, or the engine does not answer: the check at the
                # agent phase's end measures again (and fails the attempt `errored` if it cannot).
                log.warning("container %s: cannot measure its writable layer: %s", self.container[:12], exc)
                return
            now = time.monotonic()
            growth = (size - last[1]) / max(now - last[0], 1e-3) if last is not None else 0.0
            last = (now, size)
            base = BUSY_INTERVAL_SEC if self._commands else IDLE_INTERVAL_SEC
            if self._commands:
                growth = max(growth, BUSY_GROWTH_FLOOR)
            self._woken.clear()
            with contextlib.suppress(TimeoutError):
                # A command that starts ends an idle wait at once.
                await asyncio.wait_for(
                    self._woken.wait(),
                    next_interval(base, now - started, self.cap_mb * _MIB - size, growth),
                )

    async def _measure(self, allowance: int = 0) -> int:
        size = await execs.in_thread(layer_bytes, self.api, self.container) - allowance
        if size <= self.cap_mb * _MIB or self.exceeded:
            return size
        self.measured = size
        log.warning(
            "container %s: writable layer %d MiB over its cap of %d MiB, killing it",
            self.container[:12],
            size // _MIB,
            self.cap_mb,
        )
        with contextlib.suppress(NotFound, APIError):
            await execs.in_thread(self.api.kill, self.container)
        return size
