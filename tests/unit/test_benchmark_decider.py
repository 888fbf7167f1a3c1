"""The benchmark aggregate decides from the stream alone: a sync while one is pending or running, a
removed or hosted benchmark, another workspace's benchmark."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from regatta_gateway.commands import benchmark_decider as decider
from regatta_shared.events import (
    BenchmarkAdded,
    BenchmarkRemoved,
    BenchmarkSource,
    BenchmarkSyncCompleted,
    BenchmarkSyncFailed,
    BenchmarkSyncRequested,
    BenchmarkSyncStarted,
    BenchmarkTasksSynced,
    Event,
    TaskInfo,
)
from regatta_shared.events.envelope import StoredEvent, new_event

BM = "bm_1"
WS = "ws_1"
ADDER = "usr_adder"


def stream(*payloads: Event) -> list[StoredEvent]:
    """The stream as recorded: the benchmark added by ADDER, everything after by registry-sync."""
    recorded = [
        new_event(p, actor=ADDER if isinstance(p, BenchmarkAdded) else "registry-sync") for p in payloads
    ]
    return [
        StoredEvent(
            position=version,
            event_id=e.event_id,
            stream_id=f"benchmark-{BM}",
            version=version,
            type=e.type,
            data=e.data,
            metadata=e.metadata,
            recorded_at=datetime(2026, 1, 1, tzinfo=UTC),
        )
        for version, e in enumerate(recorded, start=1)
    ]


def added(hosted: bool = False) -> BenchmarkAdded:
    return BenchmarkAdded(
        benchmark_id=BM,
        workspace_id=WS,
        name="demo",
        source=BenchmarkSource(type="folder", ref="/srv/demo"),
        hosted=hosted,
    )


def synced(sync_id: str = "sync_a", *, ok: bool = True) -> list[Event]:
    page = TaskInfo(name="t1", digest="sha256:" + "0" * 64)
    end: Event = (
        BenchmarkSyncCompleted(benchmark_id=BM, sync_id=sync_id, version="1", digest="sha256:x", task_count=1)
        if ok
        else BenchmarkSyncFailed(benchmark_id=BM, sync_id=sync_id, reason="broken")
    )
    return [
        BenchmarkSyncStarted(benchmark_id=BM, sync_id=sync_id, total=1),
        BenchmarkTasksSynced(benchmark_id=BM, sync_id=sync_id, page=1, tasks=[page]),
        end,
    ]


def refusal(call) -> str:
    with pytest.raises(decider.BenchmarkRefused) as refused:
        call()
    return refused.value.reason


def test_fold_follows_the_sync_and_counts_the_version() -> None:
    events = stream(added(), *synced(), BenchmarkSyncRequested(benchmark_id=BM, sync_id="sync_b"))
    state = decider.fold(BM, events)
    assert (state.version, state.status, state.sync_id, state.removed) == (5, "pending", "sync_b", False)
    assert decider.fold(BM, events[:4]).status == "ready"
    assert decider.fold(BM, events[:2]).status == "syncing"
    assert decider.fold(BM, events[:1]).status == "pending"


@pytest.mark.parametrize("ok", [True, False])
def test_a_sync_is_decided_once_the_last_one_ended(ok: bool) -> None:
    state = decider.fold(BM, stream(added(), *synced(ok=ok)))
    decided = decider.decide_sync(state, WS, "sync_b")
    assert decided == [BenchmarkSyncRequested(benchmark_id=BM, sync_id="sync_b")]


def test_a_sync_is_refused_while_one_is_pending_or_running() -> None:
    initial = decider.fold(BM, stream(added()))
    assert refusal(lambda: decider.decide_sync(initial, WS, "sync_b")) == "sync_in_progress"
    running = decider.fold(BM, stream(added(), *synced()[:2]))
    assert refusal(lambda: decider.decide_sync(running, WS, "sync_b")) == "sync_in_progress"
    requested = decider.fold(
        BM, stream(added(), *synced(), BenchmarkSyncRequested(benchmark_id=BM, sync_id="sync_b"))
    )
    assert refusal(lambda: decider.decide_sync(requested, WS, "sync_c")) == "sync_in_progress"


def test_a_removed_benchmark_is_neither_synced_nor_removed_again() -> None:
    state = decider.fold(BM, stream(added(), *synced(), BenchmarkRemoved(benchmark_id=BM)))
    assert state.removed
    assert refusal(lambda: decider.decide_sync(state, WS, "sync_b")) == "not_found"
    assert refusal(lambda: decider.decide_remove(state, WS, ADDER, False)) == "not_found"


def test_another_workspace_and_an_empty_stream_find_nothing() -> None:
    state = decider.fold(BM, stream(added(), *synced()))
    assert refusal(lambda: decider.decide_sync(state, "ws_other", "sync_b")) == "not_found"
    assert refusal(lambda: decider.decide_remove(state, "ws_other", ADDER, True)) == "not_found"
    empty = decider.fold(BM, [])
    assert empty.version == 0
    assert refusal(lambda: decider.decide_remove(empty, WS, ADDER, True)) == "not_found"


def test_remove_is_decided_even_mid_sync_but_never_for_a_hosted_benchmark() -> None:
    mid_sync = decider.fold(BM, stream(added(), *synced()[:2]))
    assert decider.decide_remove(mid_sync, WS, ADDER, False) == [BenchmarkRemoved(benchmark_id=BM)]
    hosted = decider.fold(BM, stream(added(hosted=True), *synced()))
    assert refusal(lambda: decider.decide_remove(hosted, WS, ADDER, True)) == "hosted"


def test_the_adder_and_admins_remove_a_benchmark_and_no_other_member_does() -> None:
    state = decider.fold(BM, stream(added(), *synced()))
    assert state.added_by == ADDER
    removed = [BenchmarkRemoved(benchmark_id=BM)]
    assert decider.decide_remove(state, WS, ADDER, False) == removed
    assert decider.decide_remove(state, WS, "usr_admin", True) == removed
    assert refusal(lambda: decider.decide_remove(state, WS, "usr_other", False)) == "not_adder"


def test_a_benchmark_whose_adder_is_unknown_is_removed_by_admins_only() -> None:
    anonymous = [
        StoredEvent(
            position=1,
            event_id="e1",
            stream_id=f"benchmark-{BM}",
            version=1,
            type=BenchmarkAdded.type_name,
            data=added().model_dump(mode="json"),
            metadata={},
            recorded_at=datetime(2026, 1, 1, tzinfo=UTC),
        )
    ]
    state = decider.fold(BM, anonymous)
    assert state.added_by is None
    assert refusal(lambda: decider.decide_remove(state, WS, "usr_other", False)) == "not_adder"
    assert decider.decide_remove(state, WS, "usr_admin", True) == [BenchmarkRemoved(benchmark_id=BM)]
