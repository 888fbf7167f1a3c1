"""What the gateway holds besides its store: derived keys, the secrets vault, the artifact object store."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import nats
from fastapi import FastAPI
from regatta_shared.bus import ARTIFACTS_BUCKET, HEADERS_BYTES
from regatta_shared.eventstore import EventStore
from regatta_shared.nudge import nudge_relay_on_commit
from regatta_shared.settings import Settings

from regatta_gateway.secrets.keys import load_keys
from regatta_gateway.secrets.store import SecretVault


async def open_resources(
    app: FastAPI, settings: Settings, store: EventStore
) -> Callable[[], Awaitable[None]]:
    """Attach keys, vault and artifact store to `app.state`; returns the function that closes them."""
    keys = load_keys(settings)
    vault = SecretVault(store, keys.secrets_at_rest, keys.sealing)
    vault.create_tables()
    nc = await nats.connect(settings.nats_url, max_reconnect_attempts=-1, reconnect_time_wait=0.5)
    # An event the bus cannot carry is refused at the append (413 naming the field), not stored for
    # the relay to set aside; the limit is the server's own, from its INFO.
    store.max_event_bytes = nc.max_payload - HEADERS_BYTES
    app.state.keys = keys
    app.state.nc = nc
    app.state.vault = vault
    app.state.artifacts = await nc.jetstream().object_store(ARTIFACTS_BUCKET)
    nudge_relay_on_commit(store, nc)
    return nc.close
