"""The executor's worker: what it does with a job the runtime's JOBS consumer hands it (one per free
slot, app.py), and how a stopped run's attempts are cancelled.

Delivery: a job is acked only after its final report is on REPORTS, so an executor that dies
mid-attempt has the job redelivered after ack_wait; the consumer keeps a live attempt's job in
progress every ack_wait/3 so it is never redelivered while it runs (invariant 4). An executor told to
stop (SIGTERM) takes no new job and gives running attempts REGATTA_EXECUTOR_GRACE_SEC to finish; the
rest are abandoned without a report and their jobs NAKed, so they run again elsewhere or after the
restart: only a stop of the run cancels an attempt. Infrastructure faults are retried inside the
attempt (attempts.py), each retry reported; the scheduler records one outcome per attempt id.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from pathlib import Path

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js.errors import KeyNotFoundError
from pydantic import ValidationError
from regatta_shared.bus import ARTIFACTS_BUCKET, CANCELLED_RUNS_BUCKET, CLAIM_SUBJECT_PREFIX, TASKS_BUCKET
from regatta_shared.ceilings import TaskFileBounds
from regatta_shared.consumer import Redeliver
from regatta_shared.jobs import AttemptJob
from regatta_shared.settings import load_settings

from .attempts import DELIVERY, AttemptRunner, LiveSettings
from .environments import EnvironmentChoice
from .hosts import HAND_BACK_SEC, Hosts
from .reports import signed
from .task_cache import TaskCache

log = logging.getLogger("regatta.executor")
# A job whose handling failed in the executor itself (not the trial: that is reported) comes back after this.
JOB_RETRY_SEC = 2.0


# Stopped runs remembered at most; past it the memory restarts, and an attempt of a forgotten run that a
# stop cancels is delivered again, then reported cancelled from the stopped-runs bucket.
_STOPPED_KEPT = 10_000


def _delivery(msg: Msg) -> int:
    """Which delivery of its job a JetStream message is (1 for anything else)."""
    try:
        return max(1, int(msg.metadata.num_delivered or 1))
    except Exception:  # not a JetStream message (no reply subject of that form)
        return 1


def _live_settings(nc: NATS) -> LiveSettings:
    settings = load_settings()
    return LiveSettings(nc, settings.live_rate_bytes, settings.live_max_bytes, settings.live_interval)


def executor_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class Executor:
    def __init__(
        self,
        nc: NATS,
        work_dir: Path,
        slots: int,
        environment: EnvironmentChoice,
        ack_wait: float = 30.0,
        retry_base_delay: float = 1.0,
        sealing_key: bytes | None = None,
        started_report_delay: float = 0.0,
        infra_retries: int = 0,
        retry_max_delay: float = 60.0,
        max_deliveries: int = 10,
        live: bool = True,
        hosts: Hosts | None = None,
    ) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.work_dir = work_dir
        self.slots = slots
        self.ack_wait = ack_wait
        self.max_deliveries = max_deliveries
        self.sealing_key = sealing_key
        self.id = executor_id()
        # This host's announcement and capacity; None takes every job (a test's executor).
        self.hosts = hosts
        self.attempts = AttemptRunner(
            self.js,
            self.id,
            work_dir,
            environment,
            retry_base_delay=retry_base_delay,
            sealing_key=sealing_key,
            started_report_delay=started_report_delay,
            infra_retries=infra_retries,
            retry_max_delay=retry_max_delay,
            live=_live_settings(nc) if live else None,
        )
        self.running: dict[str, set[asyncio.Task[None]]] = {}
        # The attempt each running task is, by attempt id: a job redelivered to this very process while
        # its first copy still runs (a heartbeat missed on a loaded host) joins that copy instead of
        # running the attempt twice (two agents on one model's budget, one grading the other's work).
        self.attempt_tasks: dict[str, asyncio.Task[None]] = {}

    async def open(self) -> None:
        """The buckets a job needs; the streams exist already (the runtime waited for them)."""
        settings = load_settings()
        self.attempts.tasks = TaskCache(
            self.work_dir / "task-cache",
            await self.js.object_store(TASKS_BUCKET),
            TaskFileBounds.from_settings(settings),
            settings.task_cache_mb * 1024 * 1024,
        )
        self.attempts.artifact_store = await self.js.object_store(ARTIFACTS_BUCKET)
        self.cancelled = await self.js.key_value(CANCELLED_RUNS_BUCKET)
        if self.hosts is not None:
            await self.hosts.open()

    async def handle(self, msg: Msg) -> None:
        """One job. Returning acks it (its final report is on REPORTS); Redeliver NAKs it."""
        try:
            job = AttemptJob.model_validate_json(msg.data)
        except ValidationError as error:
            # Only the scheduler may queue jobs: one that does not parse is a version skew, which no
            # redelivery mends; it is dropped (TERM) rather than retried forever by every executor.
            log.error("a job that is not an AttemptJob was dropped: %s", str(error)[:500])
            await msg.term()
            return
        delivery = _delivery(msg)
        # Deliveries handed back by hosts too small for the job are no failures.
        taken = delivery - (await self.hosts.handed_back(job) if self.hosts and delivery > 1 else 0)
        if taken > 1:
            log.info("attempt %s: delivery %d of its job (taken %d times)", job.attempt_id, delivery, taken)
        if taken > self.max_deliveries:
            # The earlier deliveries all ended without a report: the executor died or failed on each.
            await self._report_executor_failed(job, delivery, taken - 1, None)
            return
        running = self.attempt_tasks.get(job.attempt_id)
        if running is not None and not running.done():
            await self._join(job, delivery, running)
            return
        try:
            if await self._is_cancelled(job.run_id):
                self.attempts.stopped_runs.add(job.run_id)
                DELIVERY.set(delivery)
                await self.attempts.report_cancelled(job, 1, "run stopped before the attempt started")
            elif not await self._placed_here(job, msg, delivery):
                pass
            elif job.run_id in self.attempts.stopped_runs:
                # Its stop was heard while the task's files were read for its placement.
                DELIVERY.set(delivery)
                await self.attempts.report_cancelled(job, 1, "run stopped before the attempt started")
            else:
                await self._run_attempt(job, delivery)
        except asyncio.CancelledError:
            log.warning("attempt %s abandoned as this executor stops: its job goes back", job.attempt_id)
            raise
        except Redeliver:
            raise
        except Exception as error:
            if taken >= self.max_deliveries:
                log.exception("attempt %s failed in the executor on its last delivery", job.attempt_id)
                await self._report_executor_failed(job, delivery, taken, error)
                return
            log.exception("attempt %s failed in the executor; leaving it for redelivery", job.attempt_id)
            raise Redeliver(JOB_RETRY_SEC) from error

    async def _placed_here(self, job: AttemptJob, msg: Msg, delivery: int) -> bool:
        """True to run the job here; else it was handed back (Redeliver) or its attempt ended errored
        because no live host can hold it (placement.py)."""
        if self.hosts is None or self.attempts.tasks is None:
            return True
        placement = await self.hosts.decide(job, msg, self.attempts.tasks)
        if placement.action == "run":
            return True
        if placement.action == "hand_back":
            count = await self.hosts.count_hand_back(job)
            # Every few seconds for as long as it waits: said at the first and then now and then.
            level = logging.INFO if count % 20 == 1 else logging.DEBUG
            log.log(level, "attempt %s handed back (%d times): %s", job.attempt_id, count, placement.reason)
            raise Redeliver(HAND_BACK_SEC)
        log.warning("attempt %s: %s", job.attempt_id, placement.reason)
        DELIVERY.set(delivery)
        await self.attempts.report(
            job,
            "finished",
            1,
            outcome="errored",
            exception_type="NoCapacityError",
            exception_message=placement.reason,
        )
        return False

    async def _join(self, job: AttemptJob, delivery: int, running: asyncio.Task[None]) -> None:
        """A delivery of a job whose earlier delivery still runs in this process: wait for that copy
        rather than run the attempt twice. The consumer keeps this delivery in progress meanwhile; it is
        acked once the copy has reported its outcome, and handed back if the copy ended without one (a
        failure in the executor), as the copy's own delivery is. A stop cancels the wait, which hands
        the job back like any other."""
        log.warning(
            "attempt %s: delivery %d arrived while an earlier one still runs here; not run twice",
            job.attempt_id,
            delivery,
        )
        await asyncio.wait({running})
        if running.cancelled() or running.exception() is not None:
            raise Redeliver(JOB_RETRY_SEC)

    async def _report_executor_failed(
        self, job: AttemptJob, delivery: int, failures: int, error: Exception | None
    ) -> None:
        """End the attempt `errored`, so its job is acked: the fault is the platform's, never scored."""
        DELIVERY.set(delivery)
        message = f"the executor failed on this attempt {failures} times"
        if error is not None:
            message += f"; the last time: {type(error).__name__}: {str(error)[:500]}"
        await self.attempts.report(
            job, "finished", 1, outcome="errored", exception_type="ExecutorFailed", exception_message=message
        )

    async def on_cancel(self, msg: Msg) -> None:
        run_id = msg.subject.rsplit(".", 1)[-1]
        # Before cancelling: the attempts check it to tell a stop of their run from a shutdown.
        if len(self.attempts.stopped_runs) >= _STOPPED_KEPT:
            self.attempts.stopped_runs.clear()
        self.attempts.stopped_runs.add(run_id)
        for task in list(self.running.get(run_id, ())):
            task.cancel()

    async def _is_cancelled(self, run_id: str) -> bool:
        try:
            await self.cancelled.get(run_id)
            return True
        except KeyNotFoundError:
            return False

    async def _run_attempt(self, job: AttemptJob, delivery: int = 1) -> None:
        DELIVERY.set(delivery)  # copied into the attempt's task with the rest of this context
        attempt = asyncio.create_task(self.attempts.run(job))
        self.attempt_tasks[job.attempt_id] = attempt
        attempt.add_done_callback(lambda done: self._forget(job.attempt_id, done))
        self.running.setdefault(job.run_id, set()).add(attempt)
        try:
            # Registered first, so a stop announced from here on cancels the attempt. The claim tells
            # the scheduler that a stop must wait for this sandbox before the attempt reports started.
            with contextlib.suppress(Exception):  # a hint: without it a stop only waits less
                claim = job.attempt_id.encode()
                await self.nc.publish(
                    f"{CLAIM_SUBJECT_PREFIX}.{job.run_id}",
                    claim,
                    headers=signed(job, claim, self.sealing_key),
                )
            await attempt
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if not attempt.cancelled() or (current is not None and current.cancelling()):
                raise
            if job.run_id not in self.attempts.stopped_runs:
                raise
            # Cancelled before its first step, where AttemptRunner.run cannot report it.
            await self.attempts.report_cancelled(job, 1, "run stopped before the attempt started")
        finally:
            self.running[job.run_id].discard(attempt)

    def _forget(self, attempt_id: str, task: asyncio.Task[None]) -> None:
        if self.attempt_tasks.get(attempt_id) is task:
            del self.attempt_tasks[attempt_id]
