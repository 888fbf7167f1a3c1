"""Entrypoint of scoring: a durable consumer of run events that decodes a batch and lets the scorer
decide; the runtime settles it."""

from __future__ import annotations

import asyncio

from nats.aio.msg import Msg
from regatta_shared.events import (
    AttemptFinished,
    BenchmarkTaskExcluded,
    RescoreRequested,
    RunExecutionCompleted,
    RunFailed,
    RunFinished,
    RunStopped,
)
from regatta_shared.events.codec import decode_stored
from regatta_shared.messaging.bus import EVENTS_STREAM, subject_of
from regatta_shared.settings import load_settings
from regatta_shared.system.runtime import Service

from .scorer import Scorer

SUBJECTS = [
    subject_of(AttemptFinished),
    subject_of(RunExecutionCompleted),
    subject_of(RunStopped),
    subject_of(RunFailed),
    subject_of(RunFinished),
    subject_of(RescoreRequested),
    subject_of(BenchmarkTaskExcluded),
]


async def setup(service: Service) -> None:
    scorer = Scorer(service.store)

    async def score_events(batch: list[Msg]) -> None:
        await asyncio.to_thread(scorer.on_events, [decode_stored(msg.data) for msg in batch])

    # Provisional scores are throttled per run anyway; a short top-up keeps `finished` prompt.
    service.consume(EVENTS_STREAM, "scoring", SUBJECTS, score_events, max_wait=0.02)


def main() -> None:
    Service("scoring", load_settings()).run(setup)
