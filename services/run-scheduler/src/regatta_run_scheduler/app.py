"""Entrypoints of the run-scheduler: durable consumers that decode a batch and call the service layer
(the runtime settles), and a core subscription to executors' claims."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from datetime import timedelta

from nats.aio.msg import Msg
from regatta_shared.events import (
    AttemptScheduled,
    ErroredAttemptsRerunRequested,
    RunStopRequested,
    RunSubmitted,
)
from regatta_shared.events.codec import decode_stored
from regatta_shared.messaging.bus import (
    CANCEL_SUBJECT_PREFIX,
    CANCELLED_RUNS_BUCKET,
    CLAIM_SUBJECT_PREFIX,
    EVENTS_STREAM,
    REPORT_SUBJECT,
    REPORTS_STREAM,
    subject_of,
)
from regatta_shared.security import run_keys
from regatta_shared.security.attempt_auth import AttemptKeys
from regatta_shared.security.sealing import master_key
from regatta_shared.settings import load_settings
from regatta_shared.system.runtime import Service

from .dispatch import JobDispatch
from .reports import authentic_claim, authentic_reports
from .scheduler import RUN_ENDED, RunScheduler

PURGE_EVERY_SEC = 600.0


class Entrypoints:
    def __init__(self, service: Service, scheduler: RunScheduler) -> None:
        self.service = service
        self.scheduler = scheduler
        self.jobs = JobDispatch(service.js, scheduler)

    async def on_run_commands(self, batch: list[Msg]) -> None:
        for msg in batch:
            event = decode_stored(msg.data)
            if event.type == RunStopRequested.type_name:
                await self.announce_cancel(event.data["run_id"])
            await asyncio.to_thread(self.scheduler.on_event, event)
        await self.jobs.dispatch_scheduled()

    async def dispatch_attempts(self, batch: list[Msg]) -> None:
        await self.jobs.dispatch_relayed([decode_stored(msg.data) for msg in batch])

    async def purge_ended_runs(self, batch: list[Msg]) -> None:
        events = [decode_stored(msg.data) for msg in batch]
        await asyncio.to_thread(lambda: [self.scheduler.on_run_ended(event) for event in events])

    async def record_reports(self, batch: list[Msg]) -> None:
        keys = self.scheduler.attempt_keys
        assert keys is not None
        reports = authentic_reports(keys, ((msg.data, msg.headers) for msg in batch))
        await asyncio.to_thread(self.scheduler.on_reports, reports)
        await self.jobs.dispatch_scheduled()

    async def record_claim(self, msg: Msg) -> None:
        keys = self.scheduler.attempt_keys
        assert keys is not None
        run_id = msg.subject.rsplit(".", 1)[-1]
        if (attempt_id := authentic_claim(keys, run_id, msg.data, msg.headers)) is not None:
            self.scheduler.claim(run_id, attempt_id)

    async def announce_cancel(self, run_id: str) -> None:
        """Executors learn a run is stopped from the KV flag (durable) and a core notice (immediate)."""
        kv = await self.service.js.key_value(CANCELLED_RUNS_BUCKET)
        await kv.put(run_id, b"stopped")
        await self.service.nc.publish(f"{CANCEL_SUBJECT_PREFIX}.{run_id}", b"stopped")


async def purge_periodically(scheduler: RunScheduler, stop: asyncio.Event) -> None:
    """Keys kept for a re-run are shredded once their time is up, though no event says so."""
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), PURGE_EVERY_SEC)
        if not stop.is_set():
            await asyncio.to_thread(scheduler.purge_ended_runs)


async def setup(service: Service) -> None:
    scheduler = RunScheduler(
        service.store,
        AttemptKeys(master_key(service.settings)),
        rerun_secrets_retention=timedelta(hours=service.settings.rerun_secrets_hours),
    )
    run_keys.create_table(service.store)
    entry = Entrypoints(service, scheduler)
    # Every instance hears every claim (no queue group): whichever decides a stop must know them.
    await service.subscribe(f"{CLAIM_SUBJECT_PREFIX}.*", entry.record_claim)
    await asyncio.to_thread(scheduler.purge_ended_runs)
    service.loop("purge-kept-secrets", functools.partial(purge_periodically, scheduler))
    commands = [
        subject_of(RunSubmitted),
        subject_of(RunStopRequested),
        subject_of(ErroredAttemptsRerunRequested),
    ]
    service.consume(
        EVENTS_STREAM, "run-scheduler", commands, entry.on_run_commands, batch_size=20, max_wait=0.005
    )
    service.consume(
        EVENTS_STREAM,
        "run-scheduler-dispatch",
        [subject_of(AttemptScheduled)],
        entry.dispatch_attempts,
        max_wait=0.005,
    )
    service.consume(
        REPORTS_STREAM, "run-scheduler-reports", [REPORT_SUBJECT], entry.record_reports, max_wait=0.01
    )
    ended = [subject_of(event_type) for event_type in RUN_ENDED]
    service.consume(EVENTS_STREAM, "run-scheduler-purge", ended, entry.purge_ended_runs, batch_size=50)


def main() -> None:
    Service("run-scheduler", load_settings()).run(setup)
