"""What serves operations: the ops projection (audit, budgets, webhooks) and webhook delivery."""

from __future__ import annotations

import asyncio
import os

from fastapi import FastAPI
from regatta_shared.eventstore.projections import ProjectionRunner
from regatta_shared.messaging.bus import EVENTS_STREAM
from regatta_shared.messaging.nudge import wake_on_commit
from regatta_shared.security.outbound import OutboundPolicy
from regatta_shared.security.sealing import master_key
from regatta_shared.system.runtime import Service

from regatta_gateway.notifications import delivery as webhooks
from regatta_gateway.readmodels.operations import OpsReadModels


async def open_operations(app: FastAPI, service: Service) -> None:
    """Bring the ops read models up to date, then register their projection loop and the webhook
    consumer with the service (they start once the gateway's start-up is done)."""
    runner = ProjectionRunner(service.store, OpsReadModels())
    if runner.create_tables():
        await asyncio.to_thread(runner.rebuild)  # a new read-model schema (an upgrade)
    await asyncio.to_thread(runner.catch_up)
    app.state.ops_projections = runner
    app.state.master_key = master_key(service.settings)
    wake = asyncio.Event()
    await wake_on_commit(service.nc, wake)
    service.loop("ops-projections", lambda stop: runner.run_forever(stop, max_idle_sleep=1.0, wake=wake))
    delivery = webhooks.WebhookDelivery(
        service.store,
        app.state.master_key,
        OutboundPolicy.parse(service.settings.outbound_allow),
        base_delay=float(os.environ.get("REGATTA_WEBHOOK_BASE_DELAY", "1.0")),
    )
    service.consume_each(
        EVENTS_STREAM,
        webhooks.DURABLE,
        webhooks.SUBJECTS,
        delivery.notify,
        ack_wait=webhooks.ACK_WAIT_SEC,
        slots=webhooks.CONCURRENT_DELIVERIES,
        nak_delay=webhooks.RETRY_SEC,
    )
    service.on_stop(delivery.close)
