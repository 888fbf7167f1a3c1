"""Benchmark commands: add, sync, remove. Each is decided on the benchmark's own stream (benchmark_decider.py)
and recorded as events; nothing else is written."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import PurePosixPath
from typing import Any

from regatta_shared.envelope import new_event
from regatta_shared.events import (
    BenchmarkAdded,
    BenchmarkSource,
    Event,
)
from regatta_shared.eventstore import EventStore, WrongExpectedVersion
from regatta_shared.ids import benchmark_stream, new_id
from regatta_shared.source_policy import SourcePolicy

from regatta_gateway.admission.default_registry import DefaultRegistry, needs_default, resolve_named
from regatta_gateway.admission.sources import admit_source
from regatta_gateway.commands import benchmark_decider
from regatta_gateway.commands.benchmark_sources import parse_source
from regatta_gateway.errors import Conflict, Forbidden, Invalid, NotFound, Refused
from regatta_gateway.principals import Scope
from regatta_gateway.queries.benchmarks import benchmark_with_source, find_benchmark


def add_benchmark(
    store: EventStore,
    scope: Scope,
    body: dict[str, Any],
    policy: SourcePolicy,
    *,
    hosted: bool = False,
    default_registry: DefaultRegistry | None = None,
) -> str:
    source = admit_source(_source(body), scope, policy, hosted=hosted)
    if needs_default(source):
        if default_registry is None:
            raise Invalid("registry_path (a file) or registry_url is required", field="registry_path")
        source = resolve_named(source, default_registry)
    name = _benchmark_name(body.get("name"), source)
    existing = benchmark_with_source(store, scope, source.model_dump())
    if existing is not None:
        raise Conflict(
            f"Benchmark {existing['name']!r} ({existing['id']}) already has this source and version; "
            f"sync it instead (regatta benchmark sync {existing['id']})",
            code="CONFLICT",
            field="source",
        )
    benchmark_id = new_id("bm")
    added = BenchmarkAdded(
        benchmark_id=benchmark_id, workspace_id=scope.workspace_id, name=name, source=source, hosted=hosted
    )
    try:
        store.append(
            benchmark_stream(benchmark_id),
            [new_event(added, actor=scope.principal.user_id, workspace_id=scope.workspace_id)],
            0,
        )
    except WrongExpectedVersion:
        raise Conflict("Benchmark id collision; retry", code="CONFLICT") from None
    return benchmark_id


MAX_BENCHMARK_NAME = 200


def _benchmark_name(given: Any, source: BenchmarkSource) -> str:
    """The name asked for, else the dataset's or the source's: a short single-line string."""
    if given is not None and not isinstance(given, str):
        raise Invalid("name must be a string", code="VALIDATION", field="name")
    # A folder is named after itself, not its host path (which says nothing to a reader and leaks the
    # server's layout into every page).
    default = PurePosixPath(source.ref).name if source.type == "folder" else source.ref
    name = (given or source.dataset or default).strip()
    if not name:
        raise Invalid("name is required", code="VALIDATION", field="name")
    if len(name) > MAX_BENCHMARK_NAME:
        raise Invalid(
            f"name must be at most {MAX_BENCHMARK_NAME} characters", code="VALIDATION", field="name"
        )
    if re.search(r"[\x00-\x1f\x7f]", name):
        raise Invalid("name must not contain control characters", code="VALIDATION", field="name")
    return name


def _source(body: dict[str, Any]) -> BenchmarkSource:
    return parse_source(body)


def request_sync(store: EventStore, scope: Scope, key: str) -> str:
    benchmark = find_benchmark(store, scope, key)
    sync_id = new_id("sync")
    _decide_on_benchmark(
        store,
        scope,
        benchmark["id"],
        key,
        lambda state: benchmark_decider.decide_sync(state, scope.workspace_id, sync_id),
    )
    return sync_id


def remove_benchmark(store: EventStore, scope: Scope, key: str) -> None:
    benchmark = find_benchmark(store, scope, key)
    _decide_on_benchmark(
        store,
        scope,
        benchmark["id"],
        key,
        lambda state: benchmark_decider.decide_remove(
            state, scope.workspace_id, scope.principal.user_id, scope.is_admin
        ),
    )


# registry-sync appends to a benchmark's stream without a version check (sync started, pages,
# completed), so an append can lose its version check to one of those although the command still holds:
# it is then decided again on the newer state. Only a command refused on that state is refused.
BENCHMARK_DECISIONS = 4


def _decide_on_benchmark(
    store: EventStore,
    scope: Scope,
    benchmark_id: str,
    key: str,
    decide: Callable[[benchmark_decider.BenchmarkState], list[Event]],
) -> None:
    """Fold the benchmark's stream, decide, and append with the version folded, so a concurrent command
    that decided on the same state cannot be recorded too."""
    stream = benchmark_stream(benchmark_id)
    for _ in range(BENCHMARK_DECISIONS):
        state = benchmark_decider.fold(benchmark_id, store.read_stream(stream))
        try:
            decided = decide(state)
        except benchmark_decider.BenchmarkRefused as refused:
            raise _benchmark_refusal(refused, key) from None
        recorded = [
            new_event(e, actor=scope.principal.user_id, workspace_id=scope.workspace_id) for e in decided
        ]
        try:
            store.append(stream, recorded, state.version)
            return
        except WrongExpectedVersion:
            continue
    raise Conflict("The benchmark changed while this request was handled; retry", code="CONFLICT")


def _benchmark_refusal(refused: benchmark_decider.BenchmarkRefused, key: str) -> Refused:
    if refused.reason == "hosted":
        return Forbidden("Hosted benchmarks cannot be removed", code="FORBIDDEN")
    if refused.reason == "not_adder":
        return Forbidden(
            f"Only the member who added benchmark {key!r} or a workspace admin can remove it",
            code="FORBIDDEN",
        )
    if refused.reason == "sync_in_progress":
        return Conflict("A sync is already in progress", code="CONFLICT")
    return NotFound(f"Benchmark {key!r} not found", code="NOT_FOUND")
