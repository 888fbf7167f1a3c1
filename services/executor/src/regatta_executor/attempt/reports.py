"""What the executor's worker reports besides a trial's own outcome: the outcome of an attempt that
could not run (its task archive is gone, its environment is not supported), the delayed "started"
report, and the MAC every report and claim carries.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from regatta_shared.events import Timings, Usage
from regatta_shared.messaging.jobs import AttemptJob
from regatta_shared.security.attempt_auth import MAC_HEADER, open_key, sign
from regatta_shared.security.sealing import SealError

from ..tasks.environment import TaskEnvironmentError
from .outcome import TrialOutcome

log = logging.getLogger("regatta.executor")


def signed(job: AttemptJob, payload: bytes, sealing_key: bytes | None) -> dict[str, str]:
    """The MAC that makes the scheduler believe this message (regatta_shared.security.attempt_auth). A job
    whose key does not open gets none: its reports are dropped and logged by the scheduler."""
    if not job.report_key or sealing_key is None:
        log.error("job %s carries no report key this executor can open", job.attempt_id)
        return {}
    try:
        key = open_key(job.report_key, sealing_key, job.run_id, job.attempt_id)
    except SealError:
        log.error("job %s: its report key does not open with this executor's key", job.attempt_id)
        return {}
    return {MAC_HEADER: sign(key, payload)}


def archive_missing(job: AttemptJob) -> TrialOutcome:
    message = f"the archive of task {job.task!r} ({job.task_digest}) is missing from the task store"
    return TrialOutcome(
        outcome="errored",
        retryable=False,
        rewards=None,
        primary_reward=None,
        exception_type="TaskArchiveMissing",
        exception_message=message,
        started_at=None,
        finished_at=None,
        timings=Timings(),
        usage=Usage(),
        run_failure=f"the benchmark's version can no longer be fetched: {message}",
    )


def setup_error(error: TaskEnvironmentError) -> TrialOutcome:
    return TrialOutcome(
        outcome="errored",
        retryable=False,
        rewards=None,
        primary_reward=None,
        exception_type="TaskEnvironmentError",
        exception_message=str(error),
        started_at=None,
        finished_at=None,
        timings=Timings(),
        usage=Usage(),
    )


class StartedReport:
    """An attempt's "started" report, sent once the attempt has run for `delay` seconds. A shorter
    attempt goes straight to its "finished" report, which says when it started: one report and one
    event fewer, with their relaying and projecting (docs/performance.md). Until then the scheduler
    knows the attempt only by its claim (Executor._run_attempt), which a stop waits for as for a start. The
    trial never waits for the publish; `settle()` runs before any later report, so REPORTS still
    holds "started" before the outcome whenever both are sent. `send` publishes the report (the attempt
    runner's, passed in so that this module need not import the runner that imports it)."""

    def __init__(self, send: Callable[[], Coroutine[Any, Any, None]], delay: float) -> None:
        self._send = send
        self._sent: asyncio.Task[None] | None = None
        self._timer = asyncio.get_running_loop().call_later(delay, self._start)

    def _start(self) -> None:
        self._sent = asyncio.create_task(self._send())

    async def settle(self) -> None:
        """At the end of the try: a report not yet due is never sent; one under way is awaited."""
        self._timer.cancel()
        if self._sent is not None:
            await self._sent
