"""FastStream entrypoint of scoring: decode a run event, let the scorer decide, settle."""

from __future__ import annotations

import asyncio

from faststream.nats.annotations import NatsMessage
from regatta_shared.bus import EVENTS_STREAM
from regatta_shared.codec import decode_stored
from regatta_shared.service import (
    build_app,
    configure_logging,
    durable_pull,
    make_broker,
    make_store,
    run_app,
)
from regatta_shared.settings import load_settings

from .scorer import Scorer

settings = load_settings()
broker = make_broker(settings)
scorer: Scorer | None = None


def _scorer() -> Scorer:
    global scorer
    if scorer is None:
        scorer = Scorer(make_store(settings))
    return scorer


@broker.subscriber(
    "evt.run.>",
    **durable_pull(
        EVENTS_STREAM,
        "scoring",
        filter_subjects=[
            "evt.run.AttemptFinished",
            "evt.run.RunExecutionCompleted",
            "evt.run.RunStopped",
            "evt.run.RunFinished",
        ],
    ),
)
async def score_run_event(msg: NatsMessage) -> None:
    await asyncio.to_thread(_scorer().on_event, decode_stored(msg.body))


app = build_app(broker, settings)


def main() -> None:
    configure_logging("scoring")
    run_app(app, settings)
