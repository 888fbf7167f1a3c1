"""Delivers webhook notifications, from a durable consumer of the events that notify (app.py registers
`notify` with the service runtime): several messages at once, each kept in progress while its
receivers are retried with backoff, so a failing receiver holds up neither the other deliveries nor
any run."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import httpx
from nats.aio.msg import Msg
from regatta_shared.events import (
    BenchmarkSyncFailed,
    RunFailed,
    RunFinished,
    RunStopped,
    WebhookDeliveryRecorded,
)
from regatta_shared.events.codec import decode_stored
from regatta_shared.events.envelope import deterministic_id, new_event
from regatta_shared.eventstore import EventStore, StoredEvent
from regatta_shared.messaging.bus import subject_of
from regatta_shared.security.outbound import (
    NOT_ALLOWED,
    OutboundPolicy,
    OutboundRefused,
    guarded_async_client,
    reason_of,
)
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
DURABLE = "gateway-webhooks"
# Deliveries in progress at once; a message waits for a free one.
CONCURRENT_DELIVERIES = 16
ACK_WAIT_SEC = 60.0
RETRY_SEC = 5.0
SUBJECTS = [
    subject_of(RunFinished),
    subject_of(RunFailed),
    subject_of(RunStopped),
    subject_of(BenchmarkSyncFailed),
]
MAX_ATTEMPTS = 6
DELIVERY_TIMEOUT_SEC = 30.0


class WebhookDelivery:
    def __init__(
        self,
        store: EventStore,
        master: bytes,
        outbound: OutboundPolicy,
        base_delay: float = 1.0,
    ) -> None:
        self.store = store
        self.master = master
        self.base_delay = base_delay
        # Checked again at every delivery (the target's DNS may now answer an internal address) and
        # connected to the checked address; redirects are not followed.
        self.http = guarded_async_client(outbound, "url", timeout=10.0)

    async def notify(self, msg: Msg) -> None:
        """One event that notifies: every notice it makes, delivered to every active webhook that asked
        for its kind. Returning acks it; an exception NAKs it (the consumer retries it later)."""
        event = decode_stored(msg.data)
        notices = await asyncio.to_thread(self.notices_for, event)
        await asyncio.gather(*(self.deliver(hook, notice) for hook, notice in notices))

    async def close(self) -> None:
        await self.http.aclose()

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
            # Only the status is read, never the receiver's body (its own content, and unbounded: a
            # receiver that answers an endless body must not fill the gateway's memory), and the whole
            # exchange is bounded in time whatever the receiver trickles.
            async with asyncio.timeout(DELIVERY_TIMEOUT_SEC):
                async with self.http.stream("POST", url, content=body, headers=headers) as response:
                    status = response.status_code
        except TimeoutError:
            return None, f"could not fetch url: no answer within {DELIVERY_TIMEOUT_SEC:g} s"
        except (httpx.HTTPError, OutboundRefused, OSError) as error:
            reason = reason_of(error)
            # A refused address was never contacted: "could not fetch" would send the reader looking
            # for a network fault rather than at REGATTA_OUTBOUND_ALLOW.
            return None, f"url: {reason}" if reason == NOT_ALLOWED else f"could not fetch url: {reason}"
        return status, None if 200 <= status < 300 else f"HTTP {status}"

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
