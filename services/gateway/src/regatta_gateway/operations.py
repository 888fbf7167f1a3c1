"""Starts what serves operations: the ops projection (audit, budgets, webhooks) and webhook delivery."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable

import nats
from fastapi import FastAPI
from regatta_shared.eventstore import EventStore
from regatta_shared.nudge import wake_on_commit
from regatta_shared.outbound import OutboundPolicy
from regatta_shared.projections import ProjectionRunner
from regatta_shared.sealing import master_key
from regatta_shared.settings import Settings

from regatta_gateway.notifications.delivery import WebhookDelivery
from regatta_gateway.readmodels.operations import OpsReadModels


async def open_operations(
    app: FastAPI, settings: Settings, store: EventStore
) -> Callable[[], Awaitable[None]]:
    runner = ProjectionRunner(store, OpsReadModels())
    if runner.create_tables():
        await asyncio.to_thread(runner.rebuild)  # a new read-model schema (an upgrade)
    await asyncio.to_thread(runner.catch_up)
    app.state.ops_projections = runner
    app.state.master_key = master_key(settings)
    nc = await nats.connect(settings.nats_url, max_reconnect_attempts=-1, reconnect_time_wait=0.5)
    stop, wake = asyncio.Event(), asyncio.Event()
    await wake_on_commit(nc, wake)
    projection = asyncio.create_task(runner.run_forever(stop, max_idle_sleep=1.0, wake=wake))
    delivery = WebhookDelivery(
        store,
        nc.jetstream(),
        app.state.master_key,
        OutboundPolicy.parse(settings.outbound_allow),
        base_delay=float(os.environ.get("REGATTA_WEBHOOK_BASE_DELAY", "1.0")),
    )
    await delivery.start()

    async def close() -> None:
        await delivery.stop()
        stop.set()
        await projection
        await nc.close()

    return close
