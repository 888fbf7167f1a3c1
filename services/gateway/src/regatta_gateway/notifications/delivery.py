"""Delivers webhook notifications: a durable consumer of the events that notify, one task per message so a
failing receiver is retried with backoff without holding up any other delivery, nor any run."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import httpx
import nats.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig
from regatta_shared.bus import EVENTS_STREAM, subject_of
from regatta_shared.codec import decode_stored
from regatta_shared.envelope import deterministic_id, new_event
from regatta_shared.events import (
    BenchmarkSyncFailed,
    RunFailed,
    RunFinished,
    RunStopped,
    WebhookDeliveryRecorded,
)
from regatta_shared.eventstore import EventStore, StoredEvent
from regatta_shared.outbound import OutboundPolicy, OutboundRefused, guarded_async_client, reason_of
from sqlalchemy import select

from regatta_gateway.notifications.notices import (
    SIGNATURE_HEADER,
    Notice,
    backoff,
    body_of,
    notice_for,
    signature,
)
from regatta_gateway.notifications.registry import budget_status, signing_key
from regatta_gateway.readmodels import tables as t
from regatta_gateway.readmodels.operations import webhooks

log = logging.getLogger("regatta.webhooks")
SUBJECTS = [
    subject_of(RunFinished),
    subject_of(RunFailed),
    subject_of(RunStopped),
    subject_of(BenchmarkSyncFailed),
]
MAX_ATTEMPTS = 6


class WebhookDelivery:
    def __init__(
        self,
        store: EventStore,
        js: JetStreamContext,
        master: bytes,
        outbound: OutboundPolicy,
        base_delay: float = 1.0,
    ) -> None:
        self.store = store
        self.js = js
        self.master = master
        self.base_delay = base_delay
        # Checked again at every delivery (the target's DNS may now answer an internal address) and
        # connected to the checked address; redirects are not followed.
        self.http = guarded_async_client(outbound, "url", timeout=10.0)
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.Task[None] | None = None

    async def start(self) -> None:
        config = ConsumerConfig(
            durable_name="gateway-webhooks",
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=60,
            max_deliver=-1,
            filter_subjects=SUBJECTS,
        )
        await self.js.add_consumer(EVENTS_STREAM, config)
        self._sub = await self.js.pull_subscribe_bind(durable="gateway-webhooks", stream=EVENTS_STREAM)
        self._loop = asyncio.create_task(self._consume())

    async def stop(self) -> None:
        for task in [self._loop, *self._tasks]:
            if task is not None:
                task.cancel()
        await asyncio.gather(*(t for t in [self._loop, *self._tasks] if t), return_exceptions=True)
        await self.http.aclose()

    async def _consume(self) -> None:
        while True:
            try:
                # One at a time: nats-py's fetch(n > 1) waits for the whole batch while its pull request
                # lives, which delayed notices by seconds; deliveries still run concurrently.
                messages = await self._sub.fetch(1, timeout=5.0)
            except (nats.errors.TimeoutError, TimeoutError):
                continue
            except Exception:
                log.exception("webhook fetch failed")
                await asyncio.sleep(1.0)
                continue
            for msg in messages:
                task = asyncio.create_task(self._handle(msg))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _handle(self, msg: Msg) -> None:
        heartbeat = asyncio.create_task(_heartbeat(msg))
        try:
            event = decode_stored(msg.data)
            notices = await asyncio.to_thread(self.notices_for, event)
            await asyncio.gather(*(self.deliver(hook, notice) for hook, notice in notices))
            await msg.ack()
        except Exception:
            log.exception("webhook notification failed; it will be redelivered")
            with contextlib.suppress(Exception):
                await msg.nak(delay=5.0)
        finally:
            heartbeat.cancel()

    def notices_for(self, event: StoredEvent) -> list[tuple[dict[str, Any], Notice]]:
        with self.store.read_engine.connect() as conn:
            if event.type == BenchmarkSyncFailed.type_name:
                row = conn.execute(
                    select(t.benchmarks.c.workspace_id, t.benchmarks.c.name).where(
                        t.benchmarks.c.id == event.data["benchmark_id"]
                    )
                ).first()
                subject = {"benchmark_name": row[1]} if row else {}
            else:
                row = conn.execute(
                    select(t.runs.c.workspace_id, t.runs.c.name).where(t.runs.c.id == event.data["run_id"])
                ).first()
                subject = {"run_name": row[1]} if row else {}
            if row is None:
                return []
            workspace_id = row[0]
            hooks = [
                dict(r)
                for r in conn.execute(
                    select(webhooks).where(
                        webhooks.c.workspace_id == workspace_id, webhooks.c.active.is_(True)
                    )
                ).mappings()
            ]
        notices = [n for n in [notice_for(event, workspace_id, subject)] if n]
        if event.type != BenchmarkSyncFailed.type_name:
            status = budget_status(self.store, workspace_id)
            if status["exhausted"]:
                budget_id = deterministic_id(workspace_id, "budget", str(status["budget_usd"]))
                notices.append(
                    Notice(
                        budget_id,
                        "budget.reached",
                        workspace_id,
                        {
                            "id": budget_id,
                            "kind": "budget.reached",
                            "workspace_id": workspace_id,
                            "data": status,
                        },
                    )
                )
        return [(hook, notice) for hook in hooks for notice in notices if notice.kind in hook["kinds"]]

    async def deliver(self, hook: dict[str, Any], notice: Notice) -> None:
        """Up to MAX_ATTEMPTS tries with exponential backoff; every try goes into the delivery log."""
        body = body_of(notice)
        key = signing_key(self.master, hook["id"])
        for attempt in range(1, MAX_ATTEMPTS + 1):
            status, error = await self._post(hook["url"], body, key, notice)
            delivered = status is not None and 200 <= status < 300
            retry = None if delivered or attempt == MAX_ATTEMPTS else backoff(attempt, self.base_delay)
            await asyncio.to_thread(self._record, hook, notice, attempt, delivered, status, error, retry)
            if retry is None:
                return
            await asyncio.sleep(retry)

    async def _post(self, url: str, body: bytes, key: bytes, notice: Notice) -> tuple[int | None, str | None]:
        headers = {
            "Content-Type": "application/json",
            "X-Regatta-Event": notice.kind,
            "X-Regatta-Delivery": notice.notification_id,
            SIGNATURE_HEADER: signature(key, int(time.time()), body),
        }
        try:
            response = await self.http.post(url, content=body, headers=headers)
        except (httpx.HTTPError, OutboundRefused, OSError) as error:
            return None, f"could not fetch url: {reason_of(error)}"
        # Only the status: the receiver's body is its own content, and the log is readable by members.
        return response.status_code, None if response.is_success else f"HTTP {response.status_code}"

    def _record(
        self,
        hook: dict[str, Any],
        notice: Notice,
        attempt: int,
        delivered: bool,
        status: int | None,
        error: str | None,
        retry: float | None,
    ) -> None:
        recorded = WebhookDeliveryRecorded(
            webhook_id=hook["id"],
            workspace_id=hook["workspace_id"],
            notification_id=notice.notification_id,
            kind=notice.kind,
            attempt=attempt,
            delivered=delivered,
            status_code=status,
            error=error,
            retry_in_seconds=retry,
        )
        event_id = deterministic_id(hook["id"], notice.notification_id, str(attempt))
        self.store.append(
            f"webhook-{hook['id']}",
            [new_event(recorded, event_id=event_id, actor="webhooks", workspace_id=hook["workspace_id"])],
        )


async def _heartbeat(msg: Msg) -> None:
    while True:
        await asyncio.sleep(20)
        with contextlib.suppress(Exception):
            await msg.in_progress()
