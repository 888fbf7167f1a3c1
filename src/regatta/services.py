"""How each service process is started: `regatta service <name>` and `regatta up` use the same table."""

from __future__ import annotations

import os
import sys

SERVICES = {
    "relay": "regatta_relay",
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
