"""Entrypoints of the run-scheduler: durable consumers that decode a batch, call the service layer,
and settle, and a core subscription to executors' claims. The FastStream app gives the process its
lifecycle and health check."""

from __future__ import annotations

import asyncio

import nats
from nats.aio.msg import Msg
from regatta_shared import run_keys
from regatta_shared.attempt_auth import AttemptKeys
from regatta_shared.bus import (
    CANCEL_SUBJECT_PREFIX,
    CANCELLED_RUNS_BUCKET,
    CLAIM_SUBJECT_PREFIX,
    EVENTS_STREAM,
    JOB_SUBJECT,
    JOBS_STREAM,
    REPORT_SUBJECT,
    REPORTS_STREAM,
    subject_of,
)
from regatta_shared.codec import decode_stored
from regatta_shared.consumer import BatchConsumer
from regatta_shared.events import AttemptScheduled, RunStopRequested, RunSubmitted
from regatta_shared.eventstore import StoredEvent
from regatta_shared.nudge import nudge_relay_on_commit
from regatta_shared.sealing import master_key
from regatta_shared.service import build_app, configure_logging, make_broker, make_store, run_app
from regatta_shared.settings import load_settings

from .reports import authentic_claim, authentic_reports
from .scheduler import RUN_ENDED, RunScheduler

settings = load_settings()
broker = make_broker(settings)
state: dict[str, object] = {}


def scheduler() -> RunScheduler:
    found = state.get("scheduler")
    assert isinstance(found, RunScheduler)
    return found


async def on_run_commands(batch: list[Msg]) -> None:
    for msg in batch:
        event = decode_stored(msg.data)
        if event.type == RunStopRequested.type_name:
            await announce_cancel(event.data["run_id"])
        await asyncio.to_thread(scheduler().on_event, event)
    await dispatch_scheduled()


# Jobs this process queued right after their append (dispatch_scheduled), by event id. When the relay
# brings the same AttemptScheduled back, the durable path skips them instead of building and sending
# a copy that JOBS would drop anyway. After a restart the set is empty and every job is sent again.
_queued: set[str] = set()
_QUEUED_KEPT = 100_000


async def dispatch_attempts(batch: list[Msg]) -> None:
    events = [decode_stored(msg.data) for msg in batch]
    fresh = [event for event in events if event.event_id not in _queued]
    _queued.difference_update(event.event_id for event in events)
    await dispatch(fresh)


async def dispatch_scheduled() -> None:
    """Queue the jobs of attempts this process just scheduled, without waiting for the relay to bring
    their events back. The consumer of AttemptScheduled still sees every one: it sends the jobs this
    process did not get a JetStream ack for (a crash or a failed publish right after the append loses
    nothing). A job with an ack is stored in JOBS (an R1 file stream writes before it acks), so its
    second copy, which JOBS would drop by message id, is not built or sent."""
    scheduled = scheduler().take_scheduled()
    if scheduled:
        await dispatch(scheduled)
        if len(_queued) > _QUEUED_KEPT:
            _queued.clear()  # only an optimisation: the durable path then sends copies JOBS drops
        _queued.update(event.event_id for event in scheduled)


async def dispatch(events: list[StoredEvent]) -> None:
    if not events:
        return
    jobs = zip(events, await asyncio.to_thread(scheduler().jobs_for, events), strict=True)
    js = state["nc"].jetstream()  # type: ignore[attr-defined]
    # Msg-Id = the scheduled event's id: a redelivered AttemptScheduled never queues the job twice.
    await asyncio.gather(
        *(
            js.publish(
                JOB_SUBJECT,
                job.model_dump_json().encode(),
                stream=JOBS_STREAM,
                timeout=10,
                headers={"Nats-Msg-Id": event.event_id},
            )
            for event, job in jobs
            if job is not None
        )
    )


async def purge_ended_runs(batch: list[Msg]) -> None:
    events = [decode_stored(msg.data) for msg in batch]
    await asyncio.to_thread(lambda: [scheduler().on_run_ended(event) for event in events])


async def record_reports(batch: list[Msg]) -> None:
    keys = scheduler().attempt_keys
    assert keys is not None
    reports = authentic_reports(keys, ((msg.data, msg.headers) for msg in batch))
    await asyncio.to_thread(scheduler().on_reports, reports)
    await dispatch_scheduled()


async def record_claim(msg: Msg) -> None:
    keys = scheduler().attempt_keys
    assert keys is not None
    run_id = msg.subject.rsplit(".", 1)[-1]
    if (attempt_id := authentic_claim(keys, run_id, msg.data, msg.headers)) is not None:
        scheduler().claim(run_id, attempt_id)


async def announce_cancel(run_id: str) -> None:
    """Executors learn a run is stopped from the KV flag (durable) and a core notice (immediate)."""
    nc = state["nc"]
    kv = await nc.jetstream().key_value(CANCELLED_RUNS_BUCKET)  # type: ignore[attr-defined]
    await kv.put(run_id, b"stopped")
    await nc.publish(f"{CANCEL_SUBJECT_PREFIX}.{run_id}", b"stopped")  # type: ignore[attr-defined]


async def start_consumers() -> None:
    nc = await nats.connect(settings.nats_url, max_reconnect_attempts=-1, reconnect_time_wait=0.5)
    js = nc.jetstream()
    state["nc"] = nc
    state["scheduler"] = RunScheduler(make_store(settings), AttemptKeys(master_key(settings)))
    nudge_relay_on_commit(scheduler().store, nc)
    run_keys.create_table(scheduler().store)
    # Every instance hears every claim (no queue group): whichever decides a stop must know them.
    await nc.subscribe(f"{CLAIM_SUBJECT_PREFIX}.*", cb=record_claim)
    await asyncio.to_thread(scheduler().purge_ended_runs)
    consumers = [
        BatchConsumer(
            js,
            EVENTS_STREAM,
            "run-scheduler",
            [subject_of(RunSubmitted), subject_of(RunStopRequested)],
            on_run_commands,
            batch_size=20,
            max_wait=0.005,
        ),
        BatchConsumer(
            js,
            EVENTS_STREAM,
            "run-scheduler-dispatch",
            [subject_of(AttemptScheduled)],
            dispatch_attempts,
            max_wait=0.005,
        ),
        BatchConsumer(
            js, REPORTS_STREAM, "run-scheduler-reports", [REPORT_SUBJECT], record_reports, max_wait=0.01
        ),
        BatchConsumer(
            js,
            EVENTS_STREAM,
            "run-scheduler-purge",
            [f"evt.run.{name}" for name in RUN_ENDED],
            purge_ended_runs,
            batch_size=50,
        ),
    ]
    for consumer in consumers:
        await consumer.start()
    state["consumers"] = consumers


async def stop_consumers() -> None:
    for consumer in state.get("consumers", []):  # type: ignore[attr-defined]
        await consumer.stop()
    if "nc" in state:
        await state["nc"].close()  # type: ignore[attr-defined]


app = build_app(broker, settings, after_startup=[start_consumers], on_shutdown=[stop_consumers])


def main() -> None:
    configure_logging("run-scheduler")
    run_app(app, settings)
