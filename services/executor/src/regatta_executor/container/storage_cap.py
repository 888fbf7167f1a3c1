"""The cap of a container's writable layer where the engine cannot enforce one (overlay2 without
project quotas ignores `storage_opt`): measured instead, and the container killed once it is over.

Why: nothing else stops an agent from filling the engine's disk, which every other attempt on the
host shares. The engine's own measure of the layer (`SizeRw` of an inspect with size=True) is read
while the agent phase runs (every 0.1 s while a command of the agent runs, every second between its
commands; longer when a measure takes long, since the engine walks the layer for it), and once more
when the agent phase ends. Over the cap,
the container is killed (pid 1 with it: nothing in the container can survive or delay that, unlike a
kill run by a shell inside it), and the attempt ends `failed` "storage limit exceeded (N MiB > M MiB)"
(sandbox_faults.StorageLimitExceededError). The agent can write at the disk's speed between two
measures, so the layer may pass the cap by that much before it is stopped: 0.1-0.3 s of writing, up to
a few hundred MiB at page-cache speed (and a `fallocate` is instant). Only the engine's quota
(overlay2 on xfs with pquota) holds the layer to the cap itself.
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
# The share of the engine's time a measure may take: a layer that takes 20 ms to walk is measured
# every 0.2 s at most, one of 200 ms (a layer of many thousand files) every 2 s.
COST_SHARE = 0.1

log = logging.getLogger("regatta.executor")


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
        size = (self.measured or 0) // _MIB
        return StorageLimitExceededError(f"storage limit exceeded ({size} MiB > {self.cap_mb} MiB)")

    def raise_if_exceeded(self) -> None:
        if self.exceeded:
            raise self.error()

    async def check(self) -> None:
        """Measure now (the agent phase's end); kill and raise if over the cap."""
        if not self.exceeded:
            await self._measure()
        self.raise_if_exceeded()

    async def _watch(self) -> None:
        while not self.exceeded:
            started = time.monotonic()
            try:
                await self._measure()
            except (DockerException, RequestException) as exc:
                # The container is gone or going, or the engine does not answer: the check at the
                # agent phase's end measures again (and fails the attempt `errored` if it cannot).
                log.warning("container %s: cannot measure its writable layer: %s", self.container[:12], exc)
                return
            took = time.monotonic() - started
            base = BUSY_INTERVAL_SEC if self._commands else IDLE_INTERVAL_SEC
            self._woken.clear()
            with contextlib.suppress(TimeoutError):
                # A command that starts ends an idle wait at once.
                await asyncio.wait_for(
                    self._woken.wait(), min(MAX_INTERVAL_SEC, max(base, took / COST_SHARE))
                )

    async def _measure(self) -> None:
        size = await execs.in_thread(layer_bytes, self.api, self.container)
        if size <= self.cap_mb * _MIB or self.exceeded:
            return
        self.measured = size
        log.warning(
            "container %s: writable layer %d MiB over its cap of %d MiB, killing it",
            self.container[:12],
            size // _MIB,
            self.cap_mb,
        )
        with contextlib.suppress(NotFound, APIError):
            await execs.in_thread(self.api.kill, self.container)
