"""NATS JetStream layout shared by every service: streams, subjects, durable names, buckets.

Delivery is at-least-once everywhere (architecture.md, invariant 3): every consumer is idempotent,
durables are explicit and shared, and a failing handler NACKs so the message comes back.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import nats.errors
from nats.js import JetStreamContext
from nats.js.api import (
    KeyValueConfig,
    ObjectStoreConfig,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import BucketNotFoundError, NotFoundError, ServiceUnavailableError

from regatta_shared.live import LIVE_STREAM_CONFIG

if TYPE_CHECKING:
    from regatta_shared.events import Event

EVENTS_STREAM = "EVENTS"
JOBS_STREAM = "JOBS"
REPORTS_STREAM = "REPORTS"

EVENT_SUBJECT_PREFIX = "evt"
JOB_SUBJECT = "jobs.attempt"
REPORT_SUBJECT = "reports.attempt"
CANCEL_SUBJECT_PREFIX = "regatta.cancel"
# Core NATS, no stream: an executor says it holds an attempt (run_scheduler.scheduler.RunScheduler.claim).
CLAIM_SUBJECT_PREFIX = "regatta.claims"
# The durable every executor pulls JOBS from.
EXECUTORS_DURABLE = "executors"
# Executors receive replies under their own prefix, the only inboxes their NATS user may subscribe to
# (regatta.nats_server.EXECUTOR_PERMISSIONS).
EXECUTOR_INBOX_PREFIX = "_INBOX.executor"

TASKS_BUCKET = "regatta-tasks"
ARTIFACTS_BUCKET = "regatta-artifacts"
CANCELLED_RUNS_BUCKET = "regatta-cancelled-runs"
# What each live executor host offers (regatta_executor.hosts): a key per executor, refreshed every
# few seconds and gone this long after its executor stopped refreshing it (killed) or withdrew it.
EXECUTOR_HOSTS_BUCKET = "regatta-executor-hosts"
EXECUTOR_HOSTS_TTL_SECONDS = 20.0
# How often each job was handed back by a host too small for it: those deliveries are no failures
# (REGATTA_EXECUTOR_MAX_DELIVERIES counts the others). Kept as long as a job may wait.
JOB_HANDBACKS_BUCKET = "regatta-job-handbacks"
JOB_HANDBACKS_TTL_SECONDS = 7 * 24 * 3600.0

DUPLICATE_WINDOW_SECONDS = 600.0
# Room kept for what a publish adds to a message's body: the Nats-Msg-Id header and the protocol line
# count against the server's max_payload too.
HEADERS_BYTES = 256


def event_subject(category: str, type_name: str) -> str:
    return f"{EVENT_SUBJECT_PREFIX}.{category}.{type_name}"


def subject_of(event_type: type[Event]) -> str:
    """The subject the relay publishes events of this type on."""
    return event_subject(event_type.category, event_type.type_name)


STREAMS = [
    StreamConfig(
        name=EVENTS_STREAM,
        subjects=[f"{EVENT_SUBJECT_PREFIX}.>"],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        duplicate_window=DUPLICATE_WINDOW_SECONDS,
        max_age=7 * 24 * 3600,
    ),
    StreamConfig(
        name=JOBS_STREAM,
        subjects=["jobs.>"],
        retention=RetentionPolicy.WORK_QUEUE,
        storage=StorageType.FILE,
        duplicate_window=DUPLICATE_WINDOW_SECONDS,
    ),
    StreamConfig(
        name=REPORTS_STREAM,
        subjects=["reports.>"],
        retention=RetentionPolicy.WORK_QUEUE,
        storage=StorageType.FILE,
        duplicate_window=DUPLICATE_WINDOW_SECONDS,
    ),
]


log = logging.getLogger("regatta.bus")
# What a nats-server that is down or still starting answers; anything else (a bad config) is raised.
_UNAVAILABLE = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.ConnectionClosedError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.StaleConnectionError,
    ServiceUnavailableError,
    TimeoutError,
)


async def until_nats_answers[T](what: str, call: Callable[[], Awaitable[T]]) -> T:
    """`call()`, retried with backoff while nats-server is unavailable. A service started while
    nats-server restarts too would otherwise exit at start, and nobody might restart it."""
    delay = 0.5
    while True:
        try:
            return await call()
        except _UNAVAILABLE as error:
            log.warning("%s: nats-server not answering (%r); retrying in %.1f s", what, error, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)


async def ensure_streams(js: JetStreamContext, replicas: int = 1) -> None:
    """Create or reconcile the streams and buckets; safe to call from every process at start.
    `replicas` (REGATTA_NATS_REPLICAS): copies of each stream and bucket in a NATS cluster; a stream
    made with fewer is raised to it, a bucket keeps the count it was made with."""
    await until_nats_answers("streams", lambda: _ensure_streams(js, replicas))


async def _ensure_streams(js: JetStreamContext, replicas: int) -> None:
    for config in (*STREAMS, LIVE_STREAM_CONFIG):
        config = dataclasses.replace(config, num_replicas=replicas)
        try:
            await js.stream_info(config.name)
            await js.update_stream(config)
        except NotFoundError:
            await js.add_stream(config)
    for bucket in (TASKS_BUCKET, ARTIFACTS_BUCKET):
        try:
            await js.object_store(bucket)
        except (BucketNotFoundError, NotFoundError):
            await js.create_object_store(
                bucket, ObjectStoreConfig(storage=StorageType.FILE, replicas=replicas)
            )
    buckets = (
        (CANCELLED_RUNS_BUCKET, StorageType.FILE, 0.0),
        (EXECUTOR_HOSTS_BUCKET, StorageType.MEMORY, EXECUTOR_HOSTS_TTL_SECONDS),
        (JOB_HANDBACKS_BUCKET, StorageType.FILE, JOB_HANDBACKS_TTL_SECONDS),
    )
    for bucket, storage, ttl in buckets:
        try:
            await js.key_value(bucket)
        except (BucketNotFoundError, NotFoundError):
            await js.create_key_value(
                KeyValueConfig(bucket=bucket, storage=storage, replicas=replicas, ttl=ttl or None)
            )


async def await_streams(js: JetStreamContext) -> None:
    """Wait until the streams and buckets an executor uses exist. Executors may not create or change
    streams (their NATS user cannot): the platform services declare them."""
    delay = 0.2
    while True:
        try:
            await js.stream_info(JOBS_STREAM)
            for bucket in (TASKS_BUCKET, ARTIFACTS_BUCKET):
                await js.object_store(bucket)
            for kv in (CANCELLED_RUNS_BUCKET, EXECUTOR_HOSTS_BUCKET, JOB_HANDBACKS_BUCKET):
                await js.key_value(kv)
            return
        except (*_UNAVAILABLE, BucketNotFoundError, NotFoundError) as error:
            log.info("waiting for the streams (%r); retrying in %.1f s", error, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
