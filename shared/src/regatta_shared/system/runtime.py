"""The runtime every service process runs in: one `Service` owns what was each app's own plumbing.

In one place: logging, the NATS connection (reconnecting forever), the streams (declared, or awaited
by an executor, which may not declare them), the event store (waiting for the database at start-up),
core subscriptions, the durable consumers (consumer.BatchConsumer: at-least-once, NAK with a delay on
failure), long-running loops, the /health endpoint, and the lifecycle: start in that order, settle the
heap, stop on SIGTERM in the reverse order (consumers first: no new work is taken, work under way
gets the service's `drain_grace` to finish, a second signal cuts it short). A service's app.py
declares a Service, registers thin handlers in a setup function (decode, call the service layer, let
the consumer settle), and runs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Awaitable, Callable, Sequence

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from ..eventstore import EventStore
from ..messaging.bus import await_streams, ensure_streams
from ..messaging.consumer import BatchConsumer, BatchHandler
from ..messaging.nudge import nudge_relay_on_commit
from ..settings import Settings
from .service import configure_logging, connect_nats, make_store, settle_heap

log = logging.getLogger("regatta.runtime")

Setup = Callable[["Service"], Awaitable[None]]
MessageHandler = Callable[[Msg], Awaitable[None]]
Loop = Callable[[asyncio.Event], Awaitable[None]]
# A loop told to stop gets this long to finish (the relay saves its checkpoint) before it is cancelled;
# the embedded stack waits 10 s after SIGTERM before it kills.
STOP_GRACE_SEC = 8.0


class Service:
    def __init__(
        self,
        name: str,
        settings: Settings,
        *,
        store: bool = True,
        declare_streams: bool = True,
        inbox_prefix: str = "_INBOX",
        serve_health: bool = True,
        drain_grace: float = 0.0,
    ) -> None:
        """`store`: open the event store (and nudge the relay on every commit of events).
        `declare_streams`: create or reconcile the streams; otherwise wait until they exist (an
        executor's NATS user may not declare them). `serve_health`: answer /health on
        REGATTA_HEALTH_PORT (the gateway answers it on its own HTTP port instead). `drain_grace`: seconds
        a stop lets handlers under way finish (an executor's attempts) before they are cancelled and
        their messages handed back for redelivery."""
        configure_logging(name)
        self.name = name
        self.settings = settings
        self._wants_store = store
        self._declare_streams = declare_streams
        self._inbox_prefix = inbox_prefix
        self._serve_health = serve_health
        self._drain_grace = drain_grace
        self._hurry = asyncio.Event()
        self._nc: NATS | None = None
        self._store: EventStore | None = None
        self._consumers: list[BatchConsumer] = []
        self._loops: list[tuple[str, Loop]] = []
        self._running: list[asyncio.Task[None]] = []
        self._on_stop: list[Callable[[], Awaitable[None]]] = []
        self._loops_stop = asyncio.Event()
        self._health: asyncio.Server | None = None

    @property
    def nc(self) -> NATS:
        assert self._nc is not None, "the service is not started"
        return self._nc

    @property
    def js(self) -> JetStreamContext:
        return self.nc.jetstream()

    @property
    def store(self) -> EventStore:
        assert self._store is not None, "the service has no event store (store=False) or is not started"
        return self._store

    # Registration: in the setup function given to run()/start(), before anything is consumed.

    def consume(
        self,
        stream: str,
        durable: str,
        subjects: Sequence[str],
        handler: BatchHandler,
        *,
        batch_size: int = 200,
        max_wait: float = 0.05,
        ack_wait: float = 30.0,
        slots: int = 1,
        heartbeat: bool = False,
        nak_delay: float = 1.0,
    ) -> None:
        """A shared durable on `stream` filtered to `subjects` (events: `bus.subject_of(EventClass)`).
        The handler gets a batch; returning acks it, raising NAKs it (`consumer.Redeliver` says when
        it comes back). See consumer.BatchConsumer for `slots` and `heartbeat`."""
        self._consumers.append(
            BatchConsumer(
                self.js,
                stream,
                durable,
                subjects,
                handler,
                batch_size=batch_size,
                max_wait=max_wait,
                ack_wait=ack_wait,
                slots=slots,
                heartbeat=heartbeat,
                nak_delay=nak_delay,
            )
        )

    def consume_each(
        self,
        stream: str,
        durable: str,
        subjects: Sequence[str],
        handler: MessageHandler,
        *,
        ack_wait: float = 30.0,
        slots: int = 1,
        heartbeat: bool = True,
        nak_delay: float = 1.0,
    ) -> None:
        """`consume` one message at a time, for long work: kept in progress while it runs, and each
        slot fetches its next message only once it is free."""

        async def one(batch: list[Msg]) -> None:
            (msg,) = batch
            await handler(msg)

        self.consume(
            stream,
            durable,
            subjects,
            one,
            batch_size=1,
            max_wait=0.0,
            ack_wait=ack_wait,
            slots=slots,
            heartbeat=heartbeat,
            nak_delay=nak_delay,
        )

    async def subscribe(self, subject: str, handler: MessageHandler) -> None:
        """A core NATS subscription, from now on (no stream: at-most-once notices such as claims and
        stops); every instance hears every message. nats-py restores it after a reconnect."""
        await self.nc.subscribe(subject, cb=handler)

    def loop(self, name: str, run: Loop) -> None:
        """A long-running loop of the service (the relay's tail of the store); `run(stop)` returns once
        `stop` is set."""
        self._loops.append((name, run))

    def on_stop(self, close: Callable[[], Awaitable[None]]) -> None:
        self._on_stop.append(close)

    # Lifecycle.

    def run(self, setup: Setup | None = None) -> None:
        """The process's main: start, serve /health, stop on SIGTERM or SIGINT."""
        asyncio.run(self.serve(setup))

    async def serve(self, setup: Setup | None = None) -> None:
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_signal() -> None:
            # The first signal stops (draining); a second one while draining cuts the grace short.
            if stopping.is_set():
                self._hurry.set()
            stopping.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal)
        # A start waits for NATS and the database for as long as they take: a stop asked meanwhile
        # ends that wait instead of waiting for it.
        starting = asyncio.create_task(self.start(setup), name="start")
        stop_asked = asyncio.create_task(stopping.wait(), name="stop-asked")
        try:
            await asyncio.wait({starting, stop_asked}, return_when=asyncio.FIRST_COMPLETED)
            if starting.done():
                starting.result()  # a failed start raises here
            else:
                starting.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await starting
            await stopping.wait()
        finally:
            stop_asked.cancel()
            await self.stop()

    async def start(self, setup: Setup | None = None) -> None:
        self._nc = await connect_nats(self.settings, self._inbox_prefix)
        if self._declare_streams:
            await ensure_streams(self.js, self.settings.nats_replicas)
        else:
            await await_streams(self.js)
        if self._wants_store:
            self._store = await asyncio.to_thread(make_store, self.settings)
            nudge_relay_on_commit(self._store, self._nc)
        if setup is not None:
            await setup(self)
        for consumer in self._consumers:
            await consumer.start()
        self._running = [asyncio.create_task(run(self._loops_stop), name=name) for name, run in self._loops]
        if self._serve_health and self.settings.health_port:
            self._health = await asyncio.start_server(
                self._answer_health, "127.0.0.1", self.settings.health_port
            )
        settle_heap()
        log.info("%s started", self.name)

    async def stop(self) -> None:
        if self._health is not None:
            self._health.close()
        if self._consumers:
            await asyncio.gather(
                *(consumer.stop(self._drain_grace, self._hurry) for consumer in self._consumers)
            )
        self._loops_stop.set()
        if self._running:
            _, late = await asyncio.wait(self._running, timeout=STOP_GRACE_SEC)
            for task in late:
                task.cancel()
            await asyncio.gather(*self._running, return_exceptions=True)
        for close in reversed(self._on_stop):
            with contextlib.suppress(Exception):
                await close()
        if self._nc is not None:
            with contextlib.suppress(Exception):
                await self._nc.close()
        if self._store is not None:
            self._store.dispose()

    @property
    def healthy(self) -> bool:
        return (
            self._nc is not None
            and self._nc.is_connected
            and all(consumer.alive for consumer in self._consumers)
            and not any(task.done() for task in self._running)
        )

    async def _answer_health(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """GET /health: 204 while NATS is connected and every consumer and loop runs, else 500."""
        try:
            async with asyncio.timeout(5.0):
                request = await reader.readuntil(b"\r\n\r\n")
            method, path, *_ = request.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
            if (method, path) != ("GET", "/health"):
                status = "404 Not Found"
            else:
                status = "204 No Content" if self.healthy else "500 Internal Server Error"
            writer.write(f"HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".encode())
            await writer.drain()
        except (
            TimeoutError,
            ValueError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            ConnectionError,
        ):
            pass  # a client that sends no complete request gets no answer
        finally:
            writer.close()
