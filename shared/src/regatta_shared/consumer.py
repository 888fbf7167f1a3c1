"""Batched consumption of a shared durable JetStream pull consumer (nats-py).

Hot paths (executor reports, attempt events) settle a whole batch in one store transaction, which is
what makes a run of thousands of attempts cheap. Delivery stays at-least-once: a batch is acked only
after its handler returned; on an exception every message of the batch is NAKed with a delay and comes
back, and handlers are idempotent by event or attempt id (invariant 3).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence

import nats.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from .bus import until_nats_answers

log = logging.getLogger("regatta.consumer")

BatchHandler = Callable[[list[Msg]], Awaitable[None]]


class BatchConsumer:
    def __init__(
        self,
        js: JetStreamContext,
        stream: str,
        durable: str,
        subjects: Sequence[str],
        handler: BatchHandler,
        *,
        batch_size: int = 200,
        ack_wait: float = 30.0,
        max_wait: float = 0.05,
    ) -> None:
        self.js = js
        self.stream = stream
        self.durable = durable
        self.subjects = list(subjects)
        self.handler = handler
        self.batch_size = batch_size
        self.max_wait = max_wait
        self.config = ConsumerConfig(
            durable_name=durable,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=ack_wait,
            max_deliver=-1,
            max_ack_pending=-1,
            deliver_policy=DeliverPolicy.ALL,
            filter_subjects=self.subjects if len(self.subjects) > 1 else None,
            filter_subject=self.subjects[0] if len(self.subjects) == 1 else None,
        )
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    async def start(self) -> None:
        # Creating (or updating) the durable first reconciles ack_wait/max_deliver with this code.
        await until_nats_answers(f"consumer {self.durable}", self._create)
        self._task = asyncio.create_task(self._loop(), name=f"consumer:{self.durable}")

    async def _create(self) -> None:
        await self.js.add_consumer(self.stream, self.config)
        self._sub = await self.js.pull_subscribe_bind(durable=self.durable, stream=self.stream)

    async def stop(self) -> None:
        self._stopping.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    async def _fetch(self) -> list[Msg]:
        try:
            # Block until one message arrives, then top the batch up with what is already waiting, so
            # bursts settle together. Not fetch(batch_size) here: nats-py then keeps waiting for the
            # rest of the batch for as long as the pull request lives, which held single messages for
            # seconds.
            first = await self._sub.fetch(1, timeout=5.0)
        except (nats.errors.TimeoutError, TimeoutError):
            return []
        # Only when the stream says more are waiting: a top-up fetch finding nothing lingers for its
        # whole timeout (nats-server ignores no_wait next to expires), which delayed every lone
        # message, a finished attempt's report and so the next job, by max_wait.
        waiting = first[-1].metadata.num_pending or 0
        if waiting and len(first) < self.batch_size and self.max_wait > 0:
            with contextlib.suppress(nats.errors.TimeoutError, TimeoutError):
                wanted = min(waiting, self.batch_size - len(first))
                first += await self._sub.fetch(wanted, timeout=self.max_wait)
        return first

    async def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                batch = await self._fetch()
            except Exception:
                log.exception("%s: fetch failed", self.durable)
                await asyncio.sleep(1.0)
                continue
            if not batch:
                continue
            try:
                await self.handler(batch)
            except Exception:
                log.exception("%s: batch of %d failed; it will be redelivered", self.durable, len(batch))
                for msg in batch:
                    with contextlib.suppress(Exception):
                        await msg.nak(delay=1.0)
                continue
            await asyncio.gather(*(msg.ack() for msg in batch), return_exceptions=True)
