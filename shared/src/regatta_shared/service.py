"""What every service process shares: the broker, stream set-up, a health endpoint, and how it runs."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import nats
from faststream import AckPolicy
from faststream.asgi import AsgiFastStream, make_ping_asgi
from faststream.nats import ConsumerConfig, JStream, NatsBroker, PullSub
from sqlalchemy.exc import OperationalError

from regatta_shared.bus import ensure_streams
from regatta_shared.eventstore import EventStore
from regatta_shared.settings import Settings


def configure_logging(service: str) -> None:
    level = os.environ.get("REGATTA_LOG_LEVEL", "INFO").upper()
    logging.basicConfig(level=level, format=f"%(asctime)s {service} %(levelname)s %(name)s: %(message)s")
    # Harbor logs every trial at DEBUG and harmless notices at ERROR; attempts are reported as events.
    logging.getLogger("harbor").setLevel(os.environ.get("REGATTA_HARBOR_LOG_LEVEL", "CRITICAL").upper())
    logging.getLogger("LiteLLM").setLevel(logging.ERROR)


def settle_heap() -> None:
    """Called once a service has started. What start-up allocated (modules, pydantic schemas, SQLAlchemy
    metadata, Harbor's registries) lives as long as the process; frozen, it is no longer re-scanned by
    the cyclic garbage collector's full collections."""
    gc.collect()
    gc.freeze()


def make_broker(settings: Settings, inbox_prefix: str = "_INBOX") -> NatsBroker:
    # Reconnect forever: a restarted nats-server must not take the service down with it.
    return NatsBroker(
        settings.nats_url, max_reconnect_attempts=-1, reconnect_time_wait=0.5, inbox_prefix=inbox_prefix
    )


def make_store(settings: Settings) -> EventStore:
    if settings.resolved_database_url.startswith("sqlite"):
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    store = EventStore(settings.resolved_database_url)
    until_database_answers(store.create_schema)
    return store


def until_database_answers(call: Callable[[], None]) -> None:
    """`call()`, retried with backoff while the database refuses connections (a Postgres restarting:
    "connection refused", "not yet accepting connections"). A service started meanwhile would
    otherwise exit at start, and nobody might restart it (the crash test caught scoring so). It
    blocks: at start-up nothing else runs in the process yet."""
    delay = 0.5
    while True:
        try:
            return call()
        except OperationalError as error:
            logging.getLogger("regatta.service").warning(
                "database not answering (%s); retrying in %.1f s", error.orig or error, delay
            )
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


async def prepare_streams(settings: Settings) -> None:
    nc = await nats.connect(settings.nats_url, max_reconnect_attempts=-1, reconnect_time_wait=0.5)
    try:
        await ensure_streams(nc.jetstream())
    finally:
        await nc.close()


def durable_pull(
    stream: str,
    durable: str,
    *,
    ack_wait: float = 30.0,
    filter_subjects: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Subscriber options for a shared durable pull consumer that NACKs (never drops) on failure."""
    config = ConsumerConfig(ack_wait=ack_wait, max_deliver=-1)
    if filter_subjects:
        config.filter_subjects = list(filter_subjects)
    return {
        "stream": JStream(name=stream, declare=False),
        "durable": durable,
        # One message per fetch: FastStream runs a fetched batch concurrently and its batch fetch leaks
        # a builtin TimeoutError on an idle stream; handlers here are sequential by design.
        "pull_sub": PullSub(batch_size=1, timeout=5.0),
        "ack_policy": AckPolicy.NACK_ON_ERROR,
        "config": config,
    }


def build_app(
    broker: NatsBroker,
    settings: Settings,
    *,
    on_startup: Sequence[Callable[..., Any]] = (),
    after_startup: Sequence[Callable[..., Any]] = (),
    on_shutdown: Sequence[Callable[..., Any]] = (),
    declare_streams: bool = True,
) -> AsgiFastStream:
    async def _streams() -> None:
        await prepare_streams(settings)

    return AsgiFastStream(
        broker,
        asgi_routes=[("/health", make_ping_asgi(broker, timeout=5.0))],
        on_startup=[_streams, *on_startup] if declare_streams else list(on_startup),
        after_startup=[*after_startup, settle_heap],
        on_shutdown=list(on_shutdown),
    )


def run_app(app: AsgiFastStream, settings: Settings) -> None:
    port = settings.health_port or 0
    asyncio.run(app.run(logging.WARNING, run_extra_options={"host": "127.0.0.1", "port": port}))
