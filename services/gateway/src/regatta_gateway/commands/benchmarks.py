"""Benchmark commands: add, sync, remove, exclude a task. Each is decided on the benchmark's own stream
(benchmark_decider.py) and recorded as events; nothing else is written."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import PurePosixPath
from typing import Any

from regatta_shared.envelope import new_event
from regatta_shared.events import (
    BenchmarkAdded,
    BenchmarkSource,
    BenchmarkTaskExcluded,
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
    # A folder is named after itself, not its host path (which says nothing to a reader and leaks the
    # server's layout into every page).
    default = PurePosixPath(source.ref).name if source.type == "folder" else source.ref
    return checked_name(given, source.dataset or default)


def checked_name(given: Any, default: str) -> str:
    """The benchmark name asked for (else `default`): one line of at most MAX_BENCHMARK_NAME characters."""
    if given is not None and not isinstance(given, str):
        raise Invalid("name must be a string", code="VALIDATION", field="name")
    name = (given or default).strip()
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


MAX_REASON = 500
EXCLUSION_FIELDS = frozenset({"task", "reason", "version"})


def exclude_task(store: EventStore, scope: Scope, key: str, body: dict[str, Any]) -> dict[str, str]:
    """A workspace admin takes a broken task out of a benchmark version, saying why
    (BenchmarkTaskExcluded): runs of that version then rank on their other tasks."""
    # Refused before any lookup: the same answer for every key, so it tells nothing of other workspaces.
    if not scope.is_admin:
        raise Forbidden("Only a workspace admin can exclude a task from a benchmark", code="FORBIDDEN")
    unknown = sorted(set(body) - EXCLUSION_FIELDS)
    if unknown:
        raise Invalid(
            f"Unknown field {unknown[0]!r}: task, reason and version are accepted", field=unknown[0]
        )
    task = _text(body, "task", 500)
    reason = _text(body, "reason", MAX_REASON)
    version = _text(body, "version", 200) if body.get("version") is not None else None
    benchmark = find_benchmark(store, scope, key)
    decided: list[Event] = []

    def decide(state: benchmark_decider.BenchmarkState) -> list[Event]:
        decided[:] = benchmark_decider.decide_exclude_task(
            state, scope.workspace_id, scope.is_admin, task, reason, version
        )
        return decided

    _decide_on_benchmark(store, scope, benchmark["id"], key, decide)
    excluded = decided[0]
    assert isinstance(excluded, BenchmarkTaskExcluded)
    return {"benchmark_id": benchmark["id"], "version": excluded.version, "task": task, "reason": reason}


def _text(body: dict[str, Any], name: str, limit: int) -> str:
    """A required one-line text field of the body, stripped: 400 naming the field otherwise."""
    value = body.get(name)
    if not isinstance(value, str) or not value.strip():
        raise Invalid(f"{name} is required (a non-empty string)", code="VALIDATION", field=name)
    value = value.strip()
    if len(value) > limit or re.search(r"[\x00-\x1f\x7f]", value):
        raise Invalid(f"{name} must be one line of at most {limit} characters", code="VALIDATION", field=name)
    return value


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
    if refused.reason == "not_admin":
        return Forbidden("Only a workspace admin can exclude a task from a benchmark", code="FORBIDDEN")
    if refused.reason == "no_version":
        return Conflict(f"Benchmark {key!r} has no synced version yet", code="CONFLICT")
    if refused.reason == "unknown_version":
        return Invalid(f"Benchmark {key!r} has no synced version by that name", field="version")
    if refused.reason == "unknown_task":
        return Invalid("That task is not a valid task of the benchmark's version", field="task")
    if refused.reason == "already_excluded":
        return Conflict("That task is already excluded from this version", code="CONFLICT")
    return NotFound(f"Benchmark {key!r} not found", code="NOT_FOUND")
