"""The one way a service consumes a JetStream stream: a shared durable pull consumer (nats-py).

Hot paths (executor reports, attempt events) settle a whole batch in one store transaction, which is
what makes a run of thousands of attempts cheap. Delivery stays at-least-once: a batch is acked only
after its handler returned; on an exception every message of the batch is NAKed with a delay and comes
back, and handlers are idempotent by event or attempt id (invariant 3). A handler that knows better
when to try again (a backoff by delivery count) raises `Redeliver(delay)`.

Long work (a registry sync, an attempt) outlives ack_wait: with `heartbeat` the consumer keeps the
messages in progress while their handler runs, so they are redelivered only if this process dies. With
`slots`, that many loops each fetch only once their previous batch is settled: an executor with two
free sandboxes takes two jobs, never more, and leaves the rest to other executors.

Stopping drains: no loop fetches again, a batch being handled gets the stop's grace to settle, and one
still unsettled then is cancelled and NAKed to come back as soon as no pull request of this process can
catch it, so another consumer (or this one restarted) takes it within seconds instead of after ack_wait.
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
# How long one pull request waits for a message. The server keeps a request that long even after the
# client stopped reading it, and a message sent to it then is lost until ack_wait.
FETCH_TIMEOUT = 5.0


class Redeliver(Exception):
    """Raised by a handler: NAK its messages so they come back after `delay` seconds."""

    def __init__(self, delay: float) -> None:
        super().__init__(f"redeliver in {delay:.1f} s")
        self.delay = delay


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
        slots: int = 1,
        heartbeat: bool = False,
        nak_delay: float = 1.0,
    ) -> None:
        if not subjects or slots < 1 or batch_size < 1:
            raise ValueError("a consumer needs subjects, at least one slot and a batch of at least one")
        self.js = js
        self.stream = stream
        self.durable = durable
        self.subjects = list(subjects)
        self.handler = handler
        self.batch_size = batch_size
        self.max_wait = max_wait
        self.ack_wait = ack_wait
        self.slots = slots
        self.heartbeat = heartbeat
        self.nak_delay = nak_delay
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
        self._tasks: list[asyncio.Task[None]] = []
        # The loops handling a batch right now: a stop lets them finish within its grace.
        self._busy: set[asyncio.Task[None]] = set()
        self._stopping = asyncio.Event()
        self._stopped_at = 0.0

    @property
    def alive(self) -> bool:
        return bool(self._tasks) and not any(task.done() for task in self._tasks)

    async def start(self) -> None:
        # Creating (or updating) the durable first reconciles ack_wait/max_deliver with this code.
        await until_nats_answers(f"consumer {self.durable}", self._create)
        subs = [
            await self.js.pull_subscribe_bind(durable=self.durable, stream=self.stream)
            for _ in range(self.slots)
        ]
        self._tasks = [
            asyncio.create_task(self._loop(sub), name=f"consumer:{self.durable}:{slot}")
            for slot, sub in enumerate(subs)
        ]

    async def _create(self) -> None:
        await self.js.add_consumer(self.stream, self.config)

    async def stop(self, grace: float = 0.0, hurry: asyncio.Event | None = None) -> None:
        """Stops fetching at once; a batch being handled gets `grace` seconds (cut short when `hurry`
        is set) to settle, then its handler is cancelled and the batch NAKed for immediate redelivery."""
        self._stopping.set()
        self._stopped_at = asyncio.get_running_loop().time()
        for task in self._tasks:
            if task not in self._busy:
                task.cancel()
        busy = [task for task in self._tasks if task in self._busy and not task.done()]
        if busy and grace > 0:
            log.info("%s: waiting up to %.0f s for %d handlers to finish", self.durable, grace, len(busy))
            waits: list[asyncio.Future[object]] = [*busy]
            hurried = asyncio.ensure_future(hurry.wait()) if hurry is not None else None
            if hurried is not None:
                waits.append(hurried)
            deadline = asyncio.get_running_loop().time() + grace
            while not all(task.done() for task in busy) and not (hurried and hurried.done()):
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0:
                    break
                await asyncio.wait(waits, timeout=left, return_when=asyncio.FIRST_COMPLETED)
                waits = [w for w in waits if not w.done()]
            if hurried is not None:
                hurried.cancel()
        late = [task for task in self._tasks if not task.done()]
        if late and busy:
            log.warning("%s: %d handlers still running at stop are cancelled", self.durable, len(late))
        for task in late:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _fetch(self, sub: JetStreamContext.PullSubscription) -> list[Msg]:
        try:
            # Block until one message arrives, then top the batch up with what is already waiting, so
            # bursts settle together. Not fetch(batch_size) here: nats-py then keeps waiting for the
            # rest of the batch for as long as the pull request lives, which held single messages for
            # seconds.
            first = await sub.fetch(1, timeout=FETCH_TIMEOUT)
        except (nats.errors.TimeoutError, TimeoutError):
            return []
        # Only when the stream says more are waiting: a top-up fetch finding nothing lingers for its
        # whole timeout (nats-server ignores no_wait next to expires), which delayed every lone
        # message, a finished attempt's report and so the next job, by max_wait.
        waiting = first[-1].metadata.num_pending or 0
        if waiting and len(first) < self.batch_size and self.max_wait > 0:
            with contextlib.suppress(nats.errors.TimeoutError, TimeoutError):
                wanted = min(waiting, self.batch_size - len(first))
                first += await sub.fetch(wanted, timeout=self.max_wait)
        return first

    async def _loop(self, sub: JetStreamContext.PullSubscription) -> None:
        while not self._stopping.is_set():
            try:
                batch = await self._fetch(sub)
            except Exception:
                log.exception("%s: fetch failed", self.durable)
                await asyncio.sleep(1.0)
                continue
            if not batch:
                continue
            if self._stopping.is_set():
                # Fetched as the stop began: handed back at once rather than held until ack_wait.
                await self._nak(batch, self._hand_back_delay())
                return
            current = asyncio.current_task()
            assert current is not None
            self._busy.add(current)
            try:
                await self._settle(batch)
            finally:
                self._busy.discard(current)

    async def _settle(self, batch: list[Msg]) -> None:
        beat = asyncio.create_task(self._keep_in_progress(batch)) if self.heartbeat else None
        try:
            await self.handler(batch)
        except asyncio.CancelledError:
            # Only a stop cancels a handler: the batch is unfinished work, to be delivered again soon.
            # The heartbeat ends first, so no "in progress" follows the NAK and holds the batch here.
            if beat is not None:
                beat.cancel()
            await asyncio.shield(self._nak(batch, self._hand_back_delay()))
            raise
        except Redeliver as again:
            await self._nak(batch, again.delay)
            return
        except Exception:
            log.exception("%s: batch of %d failed; it will be redelivered", self.durable, len(batch))
            await self._nak(batch, self.nak_delay)
            return
        finally:
            if beat is not None:
                beat.cancel()
        await asyncio.gather(*(msg.ack() for msg in batch), return_exceptions=True)

    def _hand_back_delay(self) -> float:
        """When a batch handed back at a stop may come back: once the pull requests this process left
        waiting (its idle slots' fetches, cancelled at the stop) have expired at the server, so that
        it goes to a live consumer, not to one of them."""
        left = self._stopped_at + FETCH_TIMEOUT + 0.5 - asyncio.get_running_loop().time()
        return max(0.0, left)

    async def _keep_in_progress(self, batch: list[Msg]) -> None:
        while True:
            await asyncio.sleep(self.ack_wait / 3)
            await asyncio.gather(*(msg.in_progress() for msg in batch), return_exceptions=True)

    @staticmethod
    async def _nak(batch: list[Msg], delay: float) -> None:
        await asyncio.gather(*(msg.nak(delay=delay) for msg in batch), return_exceptions=True)
