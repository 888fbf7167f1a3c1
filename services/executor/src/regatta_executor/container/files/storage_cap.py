"""The cap of a container's writable layer, from the task's `storage_mb` (M): its bytes, where the engine
cannot hold it to a size (overlay2 without project quotas ignores `storage_opt`), and its entries (files,
folders, links) everywhere, since no engine's quota counts them. Measured (layer_usage.py), and the
container killed once it is over.

Why: nothing else stops an agent from filling the engine's disk, or its inodes, which every other attempt
on the host shares. The limits:
- bytes: M MiB, as layer_usage counts them (a file at its size or its allocated blocks, whichever is
  more; folders and links at their blocks, so long names count what their folders grow by);
- entries: M × 256, one per 4 KiB (`ENTRY_KIB`) of the cap, the block a file takes at least on the
  engine's disk: a layer of files that hold data reaches the byte limit first, so only names that take
  no block (empty files, hard links, links, deleted image files) reach this one (64 MiB: 16,384);
- depth: folders nested no deeper than layer_usage.MAX_DEPTH levels.
The layer is measured while the agent phase runs (every 0.1 s while a command of the agent runs, every
second between its commands; longer when a measure takes long, so that measures take at most a tenth of
the time), and once more when the agent phase ends. While the layer grows fast enough to reach a limit
before the next measure, it is measured sooner, back to back if need be (`next_interval`): the cost share
gives way to the cap. Over a limit, the container is killed (pid 1 with it: nothing in the container can
survive or delay that, unlike a kill run by a shell inside it), and the attempt ends `failed` "storage
limit exceeded (N MiB > M MiB)", "(N files and folders > L, one per 4 KiB of M MiB)" with N counted in
full once the container is dead, or "(folders nested deeper than D levels)"
(sandbox_faults.StorageLimitExceededError). What can pass the cap is what is written between the last
measure and the kill: on this 2-core test host typically under 30 MiB, up to about 130 MiB when the
agent's writers starve the executor of CPU (measures late, a slow kill); a `fallocate` is instant and
passes it by its size. Only the engine's quota (overlay2 on xfs with pquota) holds the bytes to the cap
itself; entries are measured there too.
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

from regatta_executor.attempt.sandbox_faults import StorageLimitExceededError
from regatta_executor.container.exec import commands as execs
from regatta_executor.container.files.layer_usage import (
    MAX_DEPTH,
    NOTHING_WRITTEN,
    EngineLayer,
    HostLayer,
    Usage,
    Written,
    measurer,
)

_MIB = 1024 * 1024
ENTRY_KIB = 4
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
# Only a layer within about 200 MiB (or 10,000 entries) of its cap is measured more often for it.
BUSY_GROWTH_FLOOR = 1024 * _MIB
BUSY_ENTRY_GROWTH_FLOOR = 50_000
# Errors of a measure that end the watch (the check at the agent phase's end measures again): the
# engine's, and the host's walk of a folder removed with its container.
_MEASURE_ERRORS = (DockerException, RequestException, OSError)

log = logging.getLogger("regatta.executor")


def entry_limit(cap_mb: int) -> int:
    """The entries (files, folders, links) a layer under a cap of `cap_mb` MiB may hold."""
    return cap_mb * 1024 // ENTRY_KIB


def next_interval(base: float, took: float, headroom: int, growth: float) -> float:
    """Seconds to the next measure: `base` (or more, for a layer that is costly to measure) unless the
    layer, growing by `growth` (bytes or entries) a second, would pass the cap (`headroom` away)
    before then; then half the time it needs to get there, however costly the measure."""
    relaxed = min(MAX_INTERVAL_SEC, max(base, took / COST_SHARE))
    if growth <= 0:
        return relaxed
    to_cap = max(headroom, 0) / growth
    return max(MIN_INTERVAL_SEC, min(relaxed, to_cap / 2))


class StorageCap:
    """`bytes_enforced`: the engine holds the layer's bytes to the cap itself (`storage_opt` size), so
    only its entries and depth are measured. `layer`: how to measure it (by default the host's walk
    where this host has the layer's folder, else the engine's measures: layer_usage.measurer)."""

    def __init__(
        self,
        api: docker.APIClient,
        container: str,
        cap_mb: int,
        *,
        bytes_enforced: bool = False,
        layer: HostLayer | EngineLayer | None = None,
    ) -> None:
        self.api = api
        self.container = container
        self.cap_mb = cap_mb
        self.bytes_enforced = bytes_enforced
        self.entry_limit = entry_limit(cap_mb)
        self.reason: str | None = None  # what was over the cap, once something was
        self._layer = layer
        self._task: asyncio.Task[None] | None = None
        self._commands = 0
        self._woken = asyncio.Event()

    @contextlib.contextmanager
    def command(self) -> Iterator[None]:
        """Around each command of the agent: measured more often while one runs. An engine error from
        a container the cap killed meanwhile (the exec's create or start answering 409 "not running")
        is the cap's failure, not an infrastructure fault."""
        self._commands += 1
        self._woken.set()
        try:
            yield
        except DockerException as exc:
            if self.exceeded:
                raise self.error() from exc
            raise
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
        return self.reason is not None

    def error(self) -> StorageLimitExceededError:
        return StorageLimitExceededError(f"storage limit exceeded ({self.reason})")

    def raise_if_exceeded(self) -> None:
        if self.exceeded:
            raise self.error()

    async def check(self, allowance: Written = NOTHING_WRITTEN) -> None:
        """Measure now (the agent phase's end); kill and raise if over the cap. `allowance`: what the
        platform wrote into the layer since the agent's processes ended (the verifier's files), not
        the agent's."""
        if not self.exceeded:
            await self._measure(allowance)
        self.raise_if_exceeded()

    async def _watch(self) -> None:
        last: tuple[float, Usage] | None = None
        while not self.exceeded:
            started = time.monotonic()
            try:
                usage = await self._measure()
            except _MEASURE_ERRORS as exc:
                # The container is gone or going, or the engine does not answer: the check at the
                # agent phase's end measures again (and fails the attempt `errored` if it cannot).
                log.warning("container %s: cannot measure its writable layer: %s", self.container[:12], exc)
                return
            now = time.monotonic()
            growth, entry_growth = 0.0, 0.0
            if last is not None:
                elapsed = max(now - last[0], 1e-3)
                growth = (usage.bytes - last[1].bytes) / elapsed
                entry_growth = (usage.entries - last[1].entries) / elapsed
            last = (now, usage)
            base = BUSY_INTERVAL_SEC if self._commands else IDLE_INTERVAL_SEC
            if self._commands:
                growth = max(growth, BUSY_GROWTH_FLOOR)
                entry_growth = max(entry_growth, BUSY_ENTRY_GROWTH_FLOOR)
            took = now - started
            interval = next_interval(base, took, self.entry_limit - usage.entries, entry_growth)
            if not self.bytes_enforced:
                interval = min(interval, next_interval(base, took, self.cap_mb * _MIB - usage.bytes, growth))
            self._woken.clear()
            with contextlib.suppress(TimeoutError):
                # A command that starts ends an idle wait at once.
                await asyncio.wait_for(self._woken.wait(), interval)

    async def _measure(self, allowance: Written = NOTHING_WRITTEN) -> Usage:
        if self._layer is None:
            self._layer = await execs.in_thread(measurer, self.api, self.container)
        layer = self._layer
        limit = self.entry_limit + allowance.entries
        usage = await execs.in_thread(layer.measure, limit)
        size = usage.bytes - allowance.bytes
        if self.exceeded:
            return usage
        if usage.too_deep:
            self.reason = f"folders nested deeper than {MAX_DEPTH} levels"
        elif usage.entries > limit:
            # The walk stopped at the limit: the count is told once the container is still (below).
            self.reason = f"more than {self.entry_limit:,} files and folders"
        elif size > self.cap_mb * _MIB and not self.bytes_enforced:
            # Rounded up: a layer over the cap never reads as it.
            self.reason = f"{-(-size // _MIB)} MiB > {self.cap_mb} MiB"
        else:
            return usage
        log.warning(
            "container %s: writable layer over its cap (%s), killing it", self.container[:12], self.reason
        )
        counting = usage.entries > limit and not usage.too_deep
        # In one call of its own, so that a watch cancelled meanwhile still kills.
        await execs.in_thread(self._end, layer, allowance if counting else None)
        return usage

    def _end(self, layer: HostLayer | EngineLayer, recount: Written | None) -> None:
        """Kill the container. First, given the allowance to `recount` with, freeze it and count its
        entries in full for the reason (the walk that found them over stopped at the limit). Nothing
        in the container can resist the freeze or the kill."""
        try:
            if recount is not None:
                with contextlib.suppress(NotFound, APIError):
                    self.api.pause(self.container)
                with contextlib.suppress(*_MEASURE_ERRORS):
                    entries = layer.measure(None).entries - recount.entries
                    self.reason = (
                        f"{entries:,} files and folders > {self.entry_limit:,}, "
                        f"one per {ENTRY_KIB} KiB of {self.cap_mb} MiB"
                    )
        finally:
            with contextlib.suppress(NotFound, APIError):
                self.api.kill(self.container)
