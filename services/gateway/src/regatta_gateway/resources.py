"""What the gateway holds besides its store: derived keys, the secrets vault, the artifact object store,
the task archive bucket (uploaded tasks; the task browser reads every task's files from it)."""

from __future__ import annotations

from fastapi import FastAPI
from regatta_shared.messaging.bus import ARTIFACTS_BUCKET, HEADERS_BYTES, TASKS_BUCKET
from regatta_shared.system.runtime import Service

from regatta_gateway.secrets.keys import load_keys
from regatta_gateway.secrets.store import SecretVault


async def open_resources(app: FastAPI, service: Service) -> None:
    """Attach keys, vault, the NATS connection and the artifact and task stores to `app.state`."""
    store, nc = service.store, service.nc
    keys = load_keys(service.settings)
    vault = SecretVault(store, keys.secrets_at_rest, keys.sealing)
    vault.create_tables()
    # An event the bus cannot carry is refused at the append (413 naming the field), not stored for
    # the relay to set aside; the limit is the server's own, from its INFO.
    store.max_event_bytes = nc.max_payload - HEADERS_BYTES
    app.state.keys = keys
    app.state.nc = nc
    app.state.vault = vault
    app.state.artifacts = await nc.jetstream().object_store(ARTIFACTS_BUCKET)
    app.state.tasks = await nc.jetstream().object_store(TASKS_BUCKET)
