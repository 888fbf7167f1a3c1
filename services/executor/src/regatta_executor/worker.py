"""The executor's worker: takes attempts from the shared JOBS durable, one per free slot.

Delivery: a job is acked only after its final report is on REPORTS, so an executor that dies
mid-attempt has the job redelivered after ack_wait; a live attempt heartbeats (`in_progress`) every
ack_wait/3 so it is never redelivered while it runs (invariant 4). Infrastructure faults are retried
here with backoff, each retry reported; the scheduler records one outcome per attempt id.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import socket
import time
import uuid
from pathlib import Path

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeout
from nats.js.api import AckPolicy, ConsumerConfig
from nats.js.errors import KeyNotFoundError, ObjectNotFoundError
from regatta_shared.bus import (
    ARTIFACTS_BUCKET,
    CANCEL_SUBJECT_PREFIX,
    CANCELLED_RUNS_BUCKET,
    CLAIM_SUBJECT_PREFIX,
    EXECUTORS_DURABLE,
    JOB_SUBJECT,
    JOBS_STREAM,
    REPORT_SUBJECT,
    REPORTS_STREAM,
    TASKS_BUCKET,
    await_streams,
)
from regatta_shared.jobs import AttemptJob, AttemptReport
from regatta_shared.sealing import SealError, open_job_secrets_with_key

from . import artifacts
from .environments import EnvironmentChoice
from .outcome import TrialOutcome, classify, redact
from .reports import StartedReport, archive_missing, setup_error, signed
from .task_cache import TaskCache
from .task_environment import EnvironmentFidelity, TaskEnvironmentError, check_task_environment
from .trials import run_trial, trial_config

log = logging.getLogger("regatta.executor")
DURABLE = EXECUTORS_DURABLE


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
    ) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.work_dir = work_dir
        self.slots = slots
        self.environment = environment
        self.ack_wait = ack_wait
        self.retry_base_delay = retry_base_delay
        self.started_report_delay = started_report_delay
        self.sealing_key = sealing_key
        self.id = executor_id()
        self.running: dict[str, set[asyncio.Task[None]]] = {}
        self._loops: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()

    async def start(self) -> None:
        await await_streams(self.js)
        self.tasks = TaskCache(self.work_dir / "task-cache", await self.js.object_store(TASKS_BUCKET))
        self.artifact_store = await self.js.object_store(ARTIFACTS_BUCKET)
        self.cancelled = await self.js.key_value(CANCELLED_RUNS_BUCKET)
        await self.nc.subscribe(f"{CANCEL_SUBJECT_PREFIX}.*", cb=self._on_cancel)
        config = ConsumerConfig(
            durable_name=DURABLE,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=self.ack_wait,
            max_deliver=-1,
            max_ack_pending=-1,
        )
        self._loops = [asyncio.create_task(self._slot(config)) for _ in range(self.slots)]

    async def stop(self) -> None:
        self._stopping.set()
        for loop in self._loops:
            loop.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)

    async def _slot(self, config: ConsumerConfig) -> None:
        sub = await self.js.pull_subscribe(JOB_SUBJECT, durable=DURABLE, stream=JOBS_STREAM, config=config)
        while not self._stopping.is_set():
            try:
                messages = await sub.fetch(1, timeout=2.0)
            except (NatsTimeout, TimeoutError):
                continue
            except Exception:
                log.exception("fetch failed")
                await asyncio.sleep(1.0)
                continue
            for msg in messages:
                await self._handle(msg)

    async def _on_cancel(self, msg: Msg) -> None:
        run_id = msg.subject.rsplit(".", 1)[-1]
        for task in list(self.running.get(run_id, ())):
            task.cancel()

    async def _is_cancelled(self, run_id: str) -> bool:
        try:
            await self.cancelled.get(run_id)
            return True
        except KeyNotFoundError:
            return False

    async def _handle(self, msg: Msg) -> None:
        job = AttemptJob.model_validate_json(msg.data)
        heartbeat = asyncio.create_task(self._heartbeat(msg))
        try:
            if await self._is_cancelled(job.run_id):
                await self._report_cancelled(job, 1, "run stopped before the attempt started")
            else:
                await self._run_attempt(job)
            await msg.ack()
        except Exception:
            log.exception("attempt %s failed in the executor; leaving it for redelivery", job.attempt_id)
            with contextlib.suppress(Exception):
                await msg.nak(delay=2.0)
        finally:
            heartbeat.cancel()

    async def _run_attempt(self, job: AttemptJob) -> None:
        attempt = asyncio.create_task(self._attempt(job))
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
            # Cancelled before its first step, where _attempt cannot report it.
            await self._report_cancelled(job, 1, "run stopped before the attempt started")
        finally:
            self.running[job.run_id].discard(attempt)

    async def _heartbeat(self, msg: Msg) -> None:
        while True:
            await asyncio.sleep(self.ack_wait / 3)
            with contextlib.suppress(Exception):
                await msg.in_progress()

    async def _attempt(self, job: AttemptJob) -> None:
        try_number = 1
        try:
            secrets = self._unseal(job)
        except SealError as error:
            # Not retried: every executor of a deployment holds the same key, so none would do better.
            await self._report(
                job,
                "finished",
                try_number,
                outcome="errored",
                exception_type="SealError",
                exception_message=f"cannot open the run's secrets ({error}); executors need the "
                "gateway's REGATTA_MASTER_KEY",
                run_failure=f"the run's secrets cannot be opened by its executors ({error})",
            )
            return
        while True:
            started = StartedReport(self, job, try_number, self.started_report_delay)
            try:
                outcome, refs, sandbox_seconds, fidelity = await self._run_once(job, try_number, secrets)
            except asyncio.CancelledError:
                await started.settle()
                await self._report_cancelled(job, try_number, "run stopped during the attempt")
                return
            await started.settle()
            if outcome.retryable and try_number <= job.max_retries:
                delay = min(self.retry_base_delay * 2 ** (try_number - 1), 60.0)
                await self._report(
                    job,
                    "retrying",
                    try_number,
                    exception_type=outcome.exception_type,
                    exception_message=redact(outcome.exception_message, secrets),
                    delay_seconds=delay,
                )
                try:
                    await asyncio.sleep(delay)
                except asyncio.CancelledError:
                    await self._report_cancelled(job, try_number, "run stopped while waiting to retry")
                    return
                try_number += 1
                continue
            await self._report(
                job,
                "finished",
                try_number,
                outcome=outcome.outcome,
                rewards=outcome.rewards,
                primary_reward=outcome.primary_reward,
                exception_type=outcome.exception_type,
                exception_message=redact(outcome.exception_message, secrets),
                started_at=outcome.started_at,
                finished_at=outcome.finished_at,
                timings=outcome.timings,
                usage=outcome.usage,
                sandbox_seconds=sandbox_seconds,
                artifacts=refs,
                environment=self.environment.kind,
                environment_built=fidelity.built,
                environment_note=fidelity.note,
                run_failure=outcome.run_failure,
            )
            return

    def _unseal(self, job: AttemptJob) -> dict[str, str]:
        """The run's secrets, decrypted only here and only for the attempt's lifetime (invariant 6)."""
        if not job.sealed_secrets:
            return {}
        if self.sealing_key is None:
            raise SealError("this executor has no sealing key")
        return open_job_secrets_with_key(job, self.sealing_key)

    async def _run_once(
        self, job: AttemptJob, try_number: int, secrets: dict[str, str]
    ) -> tuple[TrialOutcome, list, float, EnvironmentFidelity]:
        try:
            task_dir = await self.tasks.task_dir(job.task_digest, job.task)
        except ObjectNotFoundError:
            # The archive is content-addressed and never deleted by the platform: gone from the object
            # store, it is gone for every executor and every try.
            return archive_missing(job), [], 0.0, EnvironmentFidelity(None, None)
        try:
            fidelity = check_task_environment(self.environment, task_dir)
        except TaskEnvironmentError as error:
            # The same on every try and every executor of this deployment: recorded once, not retried,
            # and errored, which is never scored as the agent's failure.
            return setup_error(error), [], 0.0, EnvironmentFidelity(None, None)
        # Unique per delivery: a job redelivered to this very process while its first copy still runs
        # (a heartbeat missed on a loaded host) must not share, and then delete, the other's folder.
        delivery = uuid.uuid4().hex[:8]
        trials_dir = self.work_dir / "trials" / f"{job.attempt_id}-{try_number}-{os.getpid()}-{delivery}"
        trials_dir.mkdir(parents=True, exist_ok=True)
        config = trial_config(job, task_dir, trials_dir, self.environment, secrets)
        started = time.monotonic()
        try:
            result = await run_trial(config)
            sandbox_seconds = time.monotonic() - started
            outcome = classify(result, job.pass_threshold, job.primary_reward_key)
            trial_dir = trials_dir / job.attempt_id
            refs = await artifacts.upload(self.artifact_store, trial_dir, list(secrets.values()))
            return outcome, refs, sandbox_seconds, fidelity
        finally:
            shutil.rmtree(trials_dir, ignore_errors=True)

    async def _report_cancelled(self, job: AttemptJob, try_number: int, message: str) -> None:
        await self._report(
            job,
            "finished",
            try_number,
            outcome="cancelled",
            exception_type="CancelledError",
            exception_message=message,
        )

    async def _report(self, job: AttemptJob, kind: str, try_number: int, **fields: object) -> None:
        report = AttemptReport(
            kind=kind,  # type: ignore[arg-type]
            run_id=job.run_id,
            attempt_id=job.attempt_id,
            try_number=try_number,
            executor_id=self.id,
            **fields,  # type: ignore[arg-type]
        )
        payload = report.model_dump_json().encode()
        await self.js.publish(
            REPORT_SUBJECT,
            payload,
            stream=REPORTS_STREAM,
            timeout=10,
            headers=signed(job, payload, self.sealing_key),
        )
