"""Rescoring: a platform administrator asks scoring to score a benchmark's runs again under the current
scoring rules (regatta_shared.rules.scoring_rules). The command is one RescoreRequested on the benchmark's
leaderboard stream; scoring appends the new scores and the leaderboard (regatta_scoring.scorer)."""

from __future__ import annotations

from typing import Any

from regatta_shared.events import RescoreRequested
from regatta_shared.events.envelope import new_event
from regatta_shared.eventstore import EventStore
from regatta_shared.ids import leaderboard_stream, new_id
from regatta_shared.rules.scoring_rules import RULES_VERSION

from regatta_gateway.errors import Forbidden, Invalid
from regatta_gateway.principals import Scope
from regatta_gateway.queries.benchmarks import find_benchmark

MAX_VERSION_CHARS = 200


def request_rescore(store: EventStore, scope: Scope, key: str, body: dict[str, Any]) -> dict[str, Any]:
    """Every run of the benchmark (or only those of `body["version"]`) whose final scores are of an older
    rules version gets final scores under the current one; runs already current are left as they are."""
    # Refused before any lookup: the same answer for every key, so it tells nothing of other workspaces.
    if not scope.principal.platform_admin:
        raise Forbidden("Only platform administrators can rescore a benchmark", code="FORBIDDEN")
    version = _version(body)
    benchmark = find_benchmark(store, scope, key)
    requested = RescoreRequested(
        rescore_id=new_id("rescore"), benchmark_id=benchmark["id"], benchmark_version=version
    )
    store.append(
        leaderboard_stream(benchmark["id"]),
        [new_event(requested, actor=scope.principal.user_id, workspace_id=scope.workspace_id)],
    )
    return {
        "rescore_id": requested.rescore_id,
        "benchmark_id": benchmark["id"],
        "benchmark_version": version,
        "rules_version": RULES_VERSION,
    }


def _version(body: dict[str, Any]) -> str | None:
    unknown = sorted(set(body) - {"version"})
    if unknown:
        raise Invalid(f"Unknown field {unknown[0]!r}: only 'version' is accepted", field=unknown[0])
    version = body.get("version")
    if version is None:
        return None
    if not isinstance(version, str) or not version.strip():
        raise Invalid("version must be a non-empty string (a benchmark version)", field="version")
    if len(version) > MAX_VERSION_CHARS or not version.isprintable():
        raise Invalid(f"version must be at most {MAX_VERSION_CHARS} printable characters", field="version")
    return version
