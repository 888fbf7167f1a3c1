"""One attempt of a job, from its secrets to its final report: the trial, run and retried here on
infrastructure faults (each retry reported), its artifacts uploaded, and every report signed.

Retries: an `errored` outcome (a fault outside the sandbox) gets the platform's REGATTA_INFRA_RETRIES
tries first, reported as infrastructure retries and no scoring condition, then the run's own
`max_retries`. Cancellation: only a stop of the run (`stopped_runs`) makes an attempt `cancelled`; an
attempt cancelled for any other reason (its executor is shutting down) reports nothing and is
delivered again, so a restart never records an outcome the attempt did not have.

Secrets are opened only here and only for the attempt's lifetime (invariant 6); a report is published
to REPORTS (a stored JetStream publish) before the job is acked (worker.py), so a crash loses none.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import shutil
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from harbor.models.trial.error_policy import policy_for
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from nats.js.errors import ObjectNotFoundError
from nats.js.object_store import ObjectStore
from regatta_shared.messaging.bus import REPORT_SUBJECT, REPORTS_STREAM
from regatta_shared.messaging.jobs import AttemptJob, AttemptReport
from regatta_shared.messaging.live import live_subject, watch_subject
from regatta_shared.security.sealing import SealError, open_job_secrets_with_key
from regatta_shared.settings import load_settings

from ..environments.choice import EnvironmentChoice
from ..tasks.cache import TaskArchiveRefused, TaskCache
from ..tasks.ceilings import check_ceilings, executor_ceilings
from ..tasks.environment import EnvironmentFidelity, TaskEnvironmentError, check_task_environment
from . import artifacts
from .image_record import read_image_record
from .integrity_record import read_integrity_record
from .live_output import Budget, LiveOutput, forwarding
from .live_sources import SandboxLogs, SandboxPoll, Watching
from .outcome import TrialOutcome, classify, redact
from .reasons import short_reason
from .redaction import Redactor
from .reports import StartedReport, archive_missing, setup_error, signed
from .trials import run_trial, trial_config

# Which JetStream delivery of its job the attempt in this context is (1 = the first): every report
# says so, so the scheduler tells a delivery superseded by a later one from the current one. A context
# variable, since one process may run two deliveries of one job at once (a missed heartbeat).
DELIVERY: contextvars.ContextVar[int] = contextvars.ContextVar("delivery", default=1)


@dataclass(frozen=True)
class LiveSettings:
    """REGATTA_LIVE_*: the connection live output goes out on, and its caps per attempt."""

    nc: NATS
    rate_bytes: int
    max_bytes: int
    interval: float


# The platform's refusals of what a task asks for (an image it may not use, a Dockerfile line that
# would make the engine fetch from the host's network, a compose key or build context we refuse):
# decided from the task's own files, so every try and every executor would refuse them again.
REFUSALS = frozenset({"ImageRefusedError", "DockerfileRefusedError", "ComposeError", "BuildContextError"})


def retryable(outcome: TrialOutcome) -> bool:
    """An errored outcome that another try may cure: Harbor's own table (the one its `retries` use)
    refuses errors that repeat on every try (a rejected key, an unknown model), which would only cost
    two more sandboxes and provider calls; the platform's refusals repeat too."""
    kind = outcome.exception_type or ""
    return outcome.retryable and kind not in REFUSALS and policy_for(kind).should_retry


class AttemptRunner:
    def __init__(
        self,
        js: JetStreamContext,
        executor_id: str,
        work_dir: Path,
        environment: EnvironmentChoice,
        retry_base_delay: float = 1.0,
        sealing_key: bytes | None = None,
        started_report_delay: float = 0.0,
        infra_retries: int = 0,
        retry_max_delay: float = 60.0,
        live: LiveSettings | None = None,
    ) -> None:
        self.js = js
        # Where and how much of a running attempt's output is forwarded; None forwards nothing.
        self.live = live
        self.id = executor_id
        self.work_dir = work_dir
        self.environment = environment
        self.retry_base_delay = retry_base_delay
        self.retry_max_delay = retry_max_delay
        self.infra_retries = infra_retries
        # Runs whose stop this executor heard of (Executor.on_cancel): the only cancellations reported.
        self.stopped_runs: set[str] = set()
        self.started_report_delay = started_report_delay
        self.sealing_key = sealing_key
        # Opened by Executor.open(); an attempt cancelled before its first step needs neither.
        self.tasks: TaskCache | None = None
        # Read once per process, like the environment: the executor's own check of every task.
        self.ceilings = executor_ceilings(load_settings(), environment)
        self.artifact_store: ObjectStore | None = None

    async def run(self, job: AttemptJob) -> None:
        try_number = 1
        try:
            secrets = self._unseal(job)
        except SealError as error:
            # Not retried: every executor of a deployment holds the same key, so none would do better.
            await self.report(
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
            started = StartedReport(
                partial(self.report, job, "started", try_number), self.started_report_delay
            )
            try:
                outcome, refs, sandbox_seconds, fidelity = await self._run_once(job, try_number, secrets)
            except asyncio.CancelledError:
                await started.settle()
                if job.run_id not in self.stopped_runs:
                    raise  # abandoned, not cancelled: the job is delivered again
                await self.report_cancelled(job, try_number, "run stopped during the attempt")
                return
            await started.settle()
            if retryable(outcome) and try_number <= self.infra_retries + job.max_retries:
                delay = min(self.retry_base_delay * 2 ** (try_number - 1), self.retry_max_delay)
                await self.report(
                    job,
                    "retrying",
                    try_number,
                    exception_type=outcome.exception_type,
                    exception_message=short_reason(redact(outcome.exception_message, secrets)),
                    delay_seconds=delay,
                    infrastructure=try_number <= self.infra_retries,
                )
                try:
                    await asyncio.sleep(delay)
                except asyncio.CancelledError:
                    if job.run_id not in self.stopped_runs:
                        raise
                    await self.report_cancelled(job, try_number, "run stopped while waiting to retry")
                    return
                try_number += 1
                continue
            await self.report(
                job,
                "finished",
                try_number,
                outcome=outcome.outcome,
                rewards=outcome.rewards,
                primary_reward=outcome.primary_reward,
                exception_type=outcome.exception_type,
                exception_message=short_reason(redact(outcome.exception_message, secrets)),
                started_at=outcome.started_at,
                finished_at=outcome.finished_at,
                timings=outcome.timings,
                usage=outcome.usage,
                sandbox_seconds=sandbox_seconds,
                artifacts=refs,
                environment=self.environment.kind,
                environment_built=fidelity.built,
                environment_note=fidelity.note,
                image=fidelity.image,
                integrity=fidelity.integrity,
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
        assert self.tasks is not None and self.artifact_store is not None, "Executor.open() opens them"
        try:
            async with self.tasks.use(job.task_digest, job.task) as task_dir:
                return await self._run_in(job, task_dir, try_number, secrets)
        except ObjectNotFoundError:
            # The archive is content-addressed and never deleted by the platform: gone from the object
            # store, it is gone for every executor and every try.
            return archive_missing(job), [], 0.0, EnvironmentFidelity(None, None)
        except TaskArchiveRefused as error:
            # The same archive is refused on every try and every executor: recorded once, not retried.
            return setup_error(TaskEnvironmentError(str(error))), [], 0.0, EnvironmentFidelity(None, None)

    async def _run_in(
        self, job: AttemptJob, task_dir: Path, try_number: int, secrets: dict[str, str]
    ) -> tuple[TrialOutcome, list, float, EnvironmentFidelity]:
        assert self.artifact_store is not None, "Executor.open() opens it"
        try:
            check_ceilings(
                self.ceilings, task_dir, job.timeout_multiplier, self.environment.kwargs.get("max_processes")
            )
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
            async with self._live_output(job, trials_dir / job.attempt_id, secrets) as (live, watching):
                # Where the agent's log folder is not on this host while it runs, its commands' output
                # is streamed too, and the sandbox's folders are read while someone watches.
                streamed = live is not None and not self.environment.traits.agent_logs_on_host

                def read_sandbox(environment: object) -> None:
                    if live is not None and watching is not None and isinstance(environment, SandboxLogs):
                        live.sandbox = SandboxPoll(environment, watching)

                try:
                    result = await run_trial(
                        config,
                        on_phase=live.phase if live else None,
                        on_log=live.command_output if live and streamed else None,
                        on_environment=read_sandbox,
                    )
                except TaskEnvironmentError as error:
                    # The trial was never made (trial_creation.py): as above, recorded once, not retried.
                    return setup_error(error), [], 0.0, EnvironmentFidelity(None, None)
            sandbox_seconds = time.monotonic() - started
            outcome = classify(result, job.pass_threshold, job.primary_reward_key)
            trial_dir = trials_dir / job.attempt_id
            refs = await artifacts.upload(self.artifact_store, trial_dir, list(secrets.values()))
            seen = replace(
                fidelity, image=read_image_record(trial_dir), integrity=read_integrity_record(trial_dir)
            )
            return outcome, refs, sandbox_seconds, seen
        finally:
            shutil.rmtree(trials_dir, ignore_errors=True)

    @contextlib.asynccontextmanager
    async def _live_output(
        self, job: AttemptJob, trial_dir: Path, secrets: dict[str, str]
    ) -> AsyncIterator[tuple[LiveOutput | None, Watching | None]]:
        """The attempt's forwarder, and, where the environment reads its sandbox's log folders only while
        watched, whether someone watches (the gateway's heartbeats on the attempt's watch subject)."""
        if self.live is None or self.live.max_bytes == 0:
            yield None, None
            return
        subject = live_subject(job.run_id, job.attempt_id)
        nc = self.live.nc

        async def publish(payload: bytes) -> None:
            await nc.publish(subject, payload)

        budget = Budget(self.live.rate_bytes, self.live.max_bytes)
        reads = self.environment.traits.reads_logs_while_watched
        output = LiveOutput(
            publish,
            trial_dir / "agent",
            Redactor(secrets.values()),
            budget,
            verifier_folder=trial_dir / "verifier" if reads else None,
        )
        watching = Watching() if reads else None
        sub = (
            await nc.subscribe(watch_subject(job.run_id, job.attempt_id), cb=watching.heard)
            if watching
            else None
        )
        try:
            await output.phase("setup")
            async with forwarding(output, self.live.interval):
                yield output, watching
        finally:
            if sub is not None:
                with contextlib.suppress(Exception):  # the connection closing: nothing left to stop
                    await sub.unsubscribe()

    async def report_cancelled(self, job: AttemptJob, try_number: int, message: str) -> None:
        await self.report(
            job,
            "finished",
            try_number,
            outcome="cancelled",
            exception_type="CancelledError",
            exception_message=message,
        )

    async def report(self, job: AttemptJob, kind: str, try_number: int, **fields: object) -> None:
        report = AttemptReport(
            kind=kind,  # type: ignore[arg-type]
            run_id=job.run_id,
            attempt_id=job.attempt_id,
            try_number=try_number,
            executor_id=self.id,
            delivery=DELIVERY.get(),
            rerun=job.rerun,
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
