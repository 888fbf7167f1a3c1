"""The parts every service process is made of (runtime.Service puts them together): logging, the NATS
connection, the event store and the waits for the database at start-up."""

from __future__ import annotations

import gc
import logging
import os
import time
from collections.abc import Callable

import nats
from nats.aio.client import Client as NATS
from sqlalchemy.exc import OperationalError

from regatta_shared.eventstore import EventStore
from regatta_shared.settings import Settings


def configure_logging(service: str) -> None:
    level = os.environ.get("REGATTA_LOG_LEVEL", "INFO").upper()
    logging.basicConfig(level=level, format=f"%(asctime)s {service} %(levelname)s %(name)s: %(message)s")
    # Harbor logs every trial at DEBUG and harmless notices at ERROR; attempts are reported as events.
    # Its per-trial loggers hang below `harbor.utils.logger`, which Harbor sets to DEBUG on import (so
    # each trial's own trial.log is complete): the service's log filters them out instead.
    level = logging.getLevelName(os.environ.get("REGATTA_HARBOR_LOG_LEVEL", "CRITICAL").upper())
    harbor_level = level if isinstance(level, int) else logging.CRITICAL
    logging.getLogger("harbor").setLevel(harbor_level)

    def quiet_harbor(record: logging.LogRecord) -> bool:
        return not record.name.startswith("harbor") or record.levelno >= harbor_level

    for handler in logging.getLogger().handlers:
        handler.addFilter(quiet_harbor)
    logging.getLogger("LiteLLM").setLevel(logging.ERROR)


def settle_heap() -> None:
    """Called once a service has started. What start-up allocated (modules, pydantic schemas, SQLAlchemy
    metadata, Harbor's registries) lives as long as the process; frozen, it is no longer re-scanned by
    the cyclic garbage collector's full collections."""
    gc.collect()
    gc.freeze()


async def connect_nats(settings: Settings, inbox_prefix: str = "_INBOX") -> NATS:
    # Reconnect forever: a restarted nats-server must not take the service down with it.
    return await nats.connect(
        settings.nats_servers, max_reconnect_attempts=-1, reconnect_time_wait=0.5, inbox_prefix=inbox_prefix
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
    otherwise exit at start, and nobody might restart it. It blocks: at start-up nothing else runs in
    the process yet."""
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
