"""Hosted benchmarks: declared by the deployment (REGATTA_HOSTED_BENCHMARKS), present in every workspace
and never removable. A benchmark lives in one workspace, so each workspace gets its own copy: its runs
and leaderboard stay the workspace's own.

An entry is a `POST /api/v1/benchmarks` body, so one naming only a dataset (`{"dataset": "name@1.0"}`)
is found in the default registry (REGATTA_DEFAULT_REGISTRY), like one added through the API."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable

from regatta_shared.eventstore import EventStore
from regatta_shared.security.source_policy import SourcePolicy
from regatta_shared.settings import Settings
from sqlalchemy import select

from regatta_gateway.admission.default_registry import DefaultRegistry
from regatta_gateway.benchmark_keys import benchmark_key, key_forms
from regatta_gateway.commands.benchmark_sources import parse_source
from regatta_gateway.commands.benchmarks import add_benchmark
from regatta_gateway.errors import Refused
from regatta_gateway.principals import Principal, Scope
from regatta_gateway.readmodels import tables as t

log = logging.getLogger("regatta.gateway")
SYSTEM = Principal("system", "system", "", "", None)


def all_workspaces(store: EventStore) -> list[tuple[str, str]]:
    with store.read_engine.connect() as conn:
        return [tuple(row) for row in conn.execute(select(t.workspaces.c.id, t.workspaces.c.name))]


def add_hosted_benchmarks(
    store: EventStore,
    settings: Settings,
    workspaces: Iterable[tuple[str, str]],
    principal: Principal = SYSTEM,
    default_registry: DefaultRegistry | None = None,
) -> None:
    """Adds to each (id, name) workspace the declared benchmarks it lacks (by source type and ref).

    One named from a default registry that cannot be read now is left out and logged, not fatal: the
    gateway still starts, and adds it at its next start (or to a workspace created once it can be read).
    A name the registry does not have is the operator's mistake, refused like any bad entry."""
    if not settings.hosted_benchmarks:
        return
    declared = json.loads(settings.hosted_benchmarks)
    policy = SourcePolicy.from_settings(settings)
    registry = default_registry or DefaultRegistry.from_settings(settings)
    for workspace_id, name in workspaces:
        with store.read_engine.connect() as conn:
            existing = {
                (row.source_type, row.source_ref)
                for row in conn.execute(
                    select(t.benchmarks.c.source_type, t.benchmarks.c.source_ref).where(
                        t.benchmarks.c.workspace_id == workspace_id, t.benchmarks.c.hosted.is_(True)
                    )
                )
            }
        scope = Scope(principal, workspace_id, name, "admin")
        for body in declared:
            source = parse_source(body)
            keys = key_forms(benchmark_key(source.model_dump()))
            if any((source.type, key) in existing for key in keys):
                continue
            try:
                add_benchmark(store, scope, body, policy, hosted=True, default_registry=registry)
            except Refused as error:
                if error.code != "REGISTRY_UNAVAILABLE":
                    raise
                log.warning(
                    "hosted benchmark %s left out of workspace %s: %s", source.ref, workspace_id, error
                )
                continue
            log.info("hosted benchmark %s added to workspace %s", source.ref, workspace_id)
