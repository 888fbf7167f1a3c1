"""The platform's services, listed once: `regatta service <name>` and `regatta up` start them from this
list, the embedded NATS server gives each its user, compose.yaml runs the same ones
(tests/unit/test_service_list.py holds it to this list)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Service:
    name: str
    module: str  # `python -m <module>` runs it
    # Whether it answers its health check on REGATTA_HEALTH_PORT: the gateway answers on its own
    # HTTP port, and the relay has no check.
    health_port: bool = True
    # The module whose `main()` the `python -m` entry calls (what the stack's launcher imports once).
    entry: str = ""

    @property
    def main_module(self) -> str:
        return self.entry or f"{self.module}.app"


# In the order `regatta up` starts them: the relay first, so that what the others append is published;
# the gateway last, so that it answers once the rest run.
SERVICES = (
    Service("relay", "regatta_relay", health_port=False, entry="regatta_relay.relay"),
    Service("registry-sync", "regatta_registry_sync"),
    Service("run-scheduler", "regatta_run_scheduler"),
    Service("scoring", "regatta_scoring"),
    Service("executor", "regatta_executor"),
    Service("gateway", "regatta_gateway", health_port=False),
)
BY_NAME = {service.name: service for service in SERVICES}
# The services' other entries the CLI and the stack launch (`python -m`), never import: the gateway's
# read-model rebuild (`regatta projections rebuild`) and the executors' environment chooser (`regatta up`).
REBUILD_MODULE = "regatta_gateway.rebuild"
CHOOSE_ENVIRONMENT_MODULE = "regatta_executor.choose_environment"
NAMES = tuple(BY_NAME)


def command(name: str) -> list[str]:
    return [sys.executable, "-m", BY_NAME[name].module]


def run_service(name: str) -> None:
    if name not in BY_NAME:
        raise SystemExit(f"unknown service {name!r}; choose one of {', '.join(NAMES)}")
    os.execv(sys.executable, command(name))
