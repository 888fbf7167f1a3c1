"""How each service process is started: `regatta service <name>` and `regatta up` use the same table."""

from __future__ import annotations

import asyncio
import os
import sys

SERVICES = {
    "relay": "regatta.relay_main",
    "registry-sync": "regatta_registry_sync",
    "run-scheduler": "regatta_run_scheduler",
    "executor": "regatta_executor",
    "scoring": "regatta_scoring",
    "gateway": "regatta_gateway",
}


def command(name: str) -> list[str]:
    return [sys.executable, "-m", SERVICES[name]]


def run_service(name: str) -> None:
    if name not in SERVICES:
        raise SystemExit(f"unknown service {name!r}; choose one of {', '.join(SERVICES)}")
    os.execv(sys.executable, command(name))


def run_relay() -> None:
    import nats
    from regatta_shared.relay import Relay
    from regatta_shared.service import configure_logging, make_store
    from regatta_shared.settings import load_settings

    configure_logging("relay")
    settings = load_settings()

    async def main() -> None:
        nc = await nats.connect(settings.nats_url, max_reconnect_attempts=-1, reconnect_time_wait=0.5)
        await Relay(make_store(settings), nc).run_forever()

    asyncio.run(main())
