"""Entrypoint of scoring: a durable consumer of run events that decodes a batch, lets the scorer
decide, and settles. The FastStream app gives the process its lifecycle and health check."""

from __future__ import annotations

import asyncio

import nats
from nats.aio.msg import Msg
from regatta_shared.bus import EVENTS_STREAM, subject_of
from regatta_shared.codec import decode_stored
from regatta_shared.consumer import BatchConsumer
from regatta_shared.events import AttemptFinished, RunExecutionCompleted, RunFailed, RunFinished, RunStopped
from regatta_shared.nudge import nudge_relay_on_commit
from regatta_shared.service import build_app, configure_logging, make_broker, make_store, run_app
from regatta_shared.settings import load_settings

from .scorer import Scorer

settings = load_settings()
broker = make_broker(settings)
state: dict[str, object] = {}
SUBJECTS = [
    subject_of(AttemptFinished),
    subject_of(RunExecutionCompleted),
    subject_of(RunStopped),
    subject_of(RunFailed),
    subject_of(RunFinished),
]


async def score_events(batch: list[Msg]) -> None:
    scorer = state["scorer"]
    assert isinstance(scorer, Scorer)
    await asyncio.to_thread(scorer.on_events, [decode_stored(msg.data) for msg in batch])


async def start_consumer() -> None:
    nc = await nats.connect(settings.nats_url, max_reconnect_attempts=-1, reconnect_time_wait=0.5)
    state["nc"] = nc
    state["scorer"] = Scorer(make_store(settings))
    nudge_relay_on_commit(state["scorer"].store, nc)  # type: ignore[attr-defined]
    # Provisional scores are throttled per run anyway; a short top-up keeps `finished` prompt.
    consumer = BatchConsumer(nc.jetstream(), EVENTS_STREAM, "scoring", SUBJECTS, score_events, max_wait=0.02)
    await consumer.start()
    state["consumer"] = consumer


async def stop_consumer() -> None:
    consumer = state.get("consumer")
    if isinstance(consumer, BatchConsumer):
        await consumer.stop()
    if "nc" in state:
        await state["nc"].close()  # type: ignore[attr-defined]


app = build_app(broker, settings, after_startup=[start_consumer], on_shutdown=[stop_consumer])


def main() -> None:
    configure_logging("scoring")
    run_app(app, settings)
