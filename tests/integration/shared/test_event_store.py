"""The event-store contract, run against SQLite and Postgres alike (docs/reference/architecture.md,
invariants 1–2)."""

from __future__ import annotations

import math
import random
import threading
import time

import orjson
import pytest
from regatta_shared.events import RunStarted
from regatta_shared.eventstore import EventStore, WrongExpectedVersion, new_event
from sqlalchemy import event


def started(run_id: str = "r1", event_id: str | None = None):
    return new_event(RunStarted(run_id=run_id), event_id=event_id)


def test_append_and_read_back_by_stream_and_position(store: EventStore) -> None:
    stored = store.append("run-a", [started("a"), started("a")], expected_version=0)
    store.append("run-b", [started("b")], expected_version=0)
    assert [e.version for e in stored] == [1, 2]
    assert [e.version for e in store.read_stream("run-a")] == [1, 2]
    assert store.read_stream("run-a")[0].payload() == RunStarted(run_id="a")
    everything = store.read_all(0)
    assert [e.stream_id for e in everything] == ["run-a", "run-a", "run-b"]
    assert [e.position for e in everything] == sorted(e.position for e in everything)
    assert store.read_all(everything[1].position) == everything[2:]
    assert store.stream_version("run-a") == 2


def test_wrong_expected_version_is_rejected_and_changes_nothing(store: EventStore) -> None:
    store.append("run-a", [started()], expected_version=0)
    with pytest.raises(WrongExpectedVersion):
        store.append("run-a", [started()], expected_version=0)
    assert store.stream_version("run-a") == 1


def test_concurrent_appenders_one_wins_one_conflicts(store: EventStore) -> None:
    store.append("run-a", [started()], expected_version=0)
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def appender() -> None:
        version = store.stream_version("run-a")
        barrier.wait()
        try:
            store.append("run-a", [started()], expected_version=version)
            outcomes.append("won")
        except WrongExpectedVersion:
            outcomes.append("conflict")

    threads = [threading.Thread(target=appender) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["conflict", "won"]
    assert store.stream_version("run-a") == 2


def test_retried_append_with_same_event_id_is_a_no_op(store: EventStore) -> None:
    first = store.append("run-a", [started(event_id="11111111-1111-1111-1111-111111111111")])
    again = store.append("run-a", [started(event_id="11111111-1111-1111-1111-111111111111")])
    assert len(first) == 1
    assert again == []
    assert len(store.read_stream("run-a")) == 1


def test_a_batch_mixing_stored_and_new_events_stores_the_new_ones(store: EventStore) -> None:
    """Insert-or-ignore per event: a redelivered message's event batched with new ones loses none of
    them (the whole batch used to be skipped, and the run-scheduler acked reports it never recorded)."""
    known = started(event_id="22222222-2222-2222-2222-222222222222")
    store.append("run-a", [known], expected_version=0)
    new = [started(), started()]
    stored = store.append("run-a", [known, *new], expected_version=1)
    assert [e.event_id for e in stored] == [e.event_id for e in new]
    assert [e.version for e in stored] == [2, 3]
    assert [e.event_id for e in store.read_stream("run-a")] == [known.event_id] + [e.event_id for e in new]
    assert store.append("run-a", [known, *new], expected_version=1) == [], "all known: a no-op"


def test_a_mixed_batch_at_a_stale_version_is_rejected_and_changes_nothing(store: EventStore) -> None:
    known = started(event_id="33333333-3333-3333-3333-333333333333")
    store.append("run-a", [known, started()], expected_version=0)
    with pytest.raises(WrongExpectedVersion):
        store.append("run-a", [known, started()], expected_version=1)
    assert store.stream_version("run-a") == 2


def test_readers_by_position_never_miss_a_slower_transaction(store: EventStore) -> None:
    """Writers stall at random inside their transactions; a tailing reader must still see every event."""
    rng = random.Random(7)

    @event.listens_for(store.engine, "before_cursor_execute")
    def _stall(conn, cursor, statement, params, context, executemany):
        if "INSERT INTO EVENTS" in statement.upper():
            time.sleep(rng.random() * 0.01)

    writers, per_writer = 6, 25
    seen: list[int] = []
    done = threading.Event()

    def write(index: int) -> None:
        for _ in range(per_writer):
            store.append(f"run-{index}", [started(str(index))])

    def tail() -> None:
        position = 0
        while True:
            finished = done.is_set()
            batch = store.read_all(position, 1000)
            for item in batch:
                seen.append(item.position)
                position = item.position
            if finished and not batch:
                return

    reader = threading.Thread(target=tail)
    reader.start()
    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done.set()
    reader.join()
    all_positions = [e.position for e in store.read_all(0, 10_000)]
    assert len(all_positions) == writers * per_writer
    assert seen == all_positions


def test_checkpoint_moves_with_its_transaction(store: EventStore) -> None:
    assert store.checkpoint("x") == 0
    with store.transaction() as conn:
        store.save_checkpoint(conn, "x", 5)
    with pytest.raises(RuntimeError), store.transaction() as conn:
        store.save_checkpoint(conn, "x", 9)
        raise RuntimeError("crash before commit")
    assert store.checkpoint("x") == 5


def test_payloads_round_trip_and_older_json_still_reads(store: EventStore) -> None:
    """Payloads are encoded and decoded by orjson; rows the json module wrote before (NaN as a bare
    token, which orjson refuses) still read on SQLite, where such rows could be stored."""
    data = {"run_id": "r1", "nested": {"ünïcode": "✓", "list": [1, 2.5, None, True]}, "big": 2**62}
    stored = store.append("run-r1", [started(event_id="e-json")])
    store.append("run-r2", [new_event(RunStarted(run_id="r2"))])
    with store.engine.begin() as conn:
        conn.exec_driver_sql(
            "UPDATE events SET data = ? WHERE event_id = 'e-json'"
            if store.is_sqlite
            else "UPDATE events SET data = %(d)s::jsonb WHERE event_id = 'e-json'",
            ('{"run_id": "r1", "reward": NaN}',) if store.is_sqlite else {"d": orjson.dumps(data).decode()},
        )
    read = store.read_all(stored[0].position - 1, 1)[0]
    if store.is_sqlite:
        assert read.data["run_id"] == "r1" and math.isnan(read.data["reward"])
    else:
        assert read.data == data
