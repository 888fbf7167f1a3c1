"""Hosted benchmarks: declared by the deployment (REGATTA_HOSTED_BENCHMARKS), present in every workspace
and never removable. A benchmark lives in one workspace, so each workspace gets its own copy: its runs
and leaderboard stay the workspace's own."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable

from regatta_shared.eventstore import EventStore
from regatta_shared.settings import Settings
from regatta_shared.source_policy import SourcePolicy
from sqlalchemy import select

from regatta_gateway.commands.benchmark_sources import parse_source
from regatta_gateway.commands.benchmarks import add_benchmark
from regatta_gateway.http.auth import Principal, Scope
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
) -> None:
    """Adds to each (id, name) workspace the declared benchmarks it lacks (by source type and ref)."""
    if not settings.hosted_benchmarks:
        return
    declared = json.loads(settings.hosted_benchmarks)
    policy = SourcePolicy.from_settings(settings)
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
            if (source.type, source.ref) in existing:
                continue
            add_benchmark(store, scope, body, policy, hosted=True)
            log.info("hosted benchmark %s added to workspace %s", source.ref, workspace_id)
