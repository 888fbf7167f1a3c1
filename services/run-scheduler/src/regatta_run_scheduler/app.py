"""FastStream entrypoints of the run-scheduler: decode, call the service layer, settle."""

from __future__ import annotations

import asyncio

import nats
from faststream.nats.annotations import NatsMessage
from regatta_shared.bus import (
    CANCEL_SUBJECT_PREFIX,
    CANCELLED_RUNS_BUCKET,
    EVENTS_STREAM,
    JOB_SUBJECT,
    JOBS_STREAM,
    REPORT_SUBJECT,
    REPORTS_STREAM,
)
from regatta_shared.codec import decode_stored
from regatta_shared.jobs import AttemptReport
from regatta_shared.service import (
    build_app,
    configure_logging,
    durable_pull,
    make_broker,
    make_store,
    run_app,
)
from regatta_shared.settings import load_settings

from .scheduler import RunScheduler

settings = load_settings()
broker = make_broker(settings)
scheduler: RunScheduler | None = None


def _scheduler() -> RunScheduler:
    global scheduler
    if scheduler is None:
        scheduler = RunScheduler(make_store(settings))
    return scheduler


@broker.subscriber(
    "evt.run.>",
    **durable_pull(
        EVENTS_STREAM,
        "run-scheduler",
        filter_subjects=["evt.run.RunSubmitted", "evt.run.RunStopRequested"],
    ),
)
async def on_run_command(msg: NatsMessage) -> None:
    event = decode_stored(msg.body)
    if event.type == "RunStopRequested":
        await announce_cancel(event.data["run_id"])
    await asyncio.to_thread(_scheduler().on_event, event)


@broker.subscriber(
    "evt.run.AttemptScheduled",
    **durable_pull(EVENTS_STREAM, "run-scheduler-dispatch", filter_subjects=["evt.run.AttemptScheduled"]),
)
async def dispatch_attempt(msg: NatsMessage) -> None:
    event = decode_stored(msg.body)
    job = await asyncio.to_thread(_scheduler().job_for, event)
    if job is None:
        return
    # Msg-Id = the scheduled event's id: a redelivered AttemptScheduled never queues the job twice.
    await broker.publish(
        job.model_dump_json().encode(),
        JOB_SUBJECT,
        stream=JOBS_STREAM,
        headers={"Nats-Msg-Id": event.event_id},
        timeout=10,
    )


@broker.subscriber(REPORT_SUBJECT, **durable_pull(REPORTS_STREAM, "run-scheduler-reports"))
async def record_report(msg: NatsMessage) -> None:
    report = AttemptReport.model_validate_json(msg.body)
    await asyncio.to_thread(_scheduler().on_report, report)


async def announce_cancel(run_id: str) -> None:
    """Executors learn a run is stopped from the KV flag (durable) and a core notice (immediate)."""
    nc = await nats.connect(settings.nats_url)
    try:
        kv = await nc.jetstream().key_value(CANCELLED_RUNS_BUCKET)
        await kv.put(run_id, b"stopped")
        await nc.publish(f"{CANCEL_SUBJECT_PREFIX}.{run_id}", b"stopped")
        await nc.flush()
    finally:
        await nc.close()


app = build_app(broker, settings)


def main() -> None:
    configure_logging("run-scheduler")
    run_app(app, settings)
