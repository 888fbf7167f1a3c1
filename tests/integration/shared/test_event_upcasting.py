"""Events evolve: a payload stored in an older shape is read in its type's current shape, from the
store and from the bus (a real nats-server), by projections and aggregates alike (events/base.py,
codec.py), on SQLite and Postgres. The stored rows themselves are never rewritten."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nats
import pytest
from pydantic import ValidationError
from regatta_gateway.readmodels import ReadModels
from regatta_gateway.readmodels import tables as t
from regatta_relay.relay import Relay
from regatta_run_scheduler import run as aggregate
from regatta_scoring.scores import tally
from regatta_shared.events import Event, RunQueued, RunSubmitted
from regatta_shared.events.codec import decode_stored, encode_stored
from regatta_shared.events.envelope import NewEvent, StoredEvent
from regatta_shared.eventstore import EventStore, new_event
from regatta_shared.eventstore.projections import ProjectionRunner
from regatta_shared.messaging.bus import ensure_streams, subject_of
from sqlalchemy import select

from regatta import nats_server
from tests.support.runs import submission


def _why_renamed_reason(data: dict[str, Any]) -> dict[str, Any]:
    data["reason"] = data.pop("why")
    return data


def _severity_added(data: dict[str, Any]) -> dict[str, Any]:
    data.setdefault("severity", "info")
    return data


class ProbeNoted(Event):
    """An event type that evolved twice: 1 → 2 renamed `why` to `reason`, 2 → 3 added a required
    `severity` (defaulted for events stored before it)."""

    type_name = "UpcastingProbeNoted"
    category = "test"
    schema_version = 3
    upcasters = {1: _why_renamed_reason, 2: _severity_added}
    probe_id: str
    reason: str
    severity: str


def _raw(type_name: str, data: dict[str, Any], **metadata: Any) -> NewEvent:
    """An event as older code wrote it: its payload as it was, no schema version unless given."""
    return NewEvent(
        event_id=f"{type_name}-{len(str(data))}-{metadata}", type=type_name, data=data, metadata=metadata
    )


def _bus(events: list[StoredEvent]) -> list[StoredEvent]:
    return [decode_stored(encode_stored(event)) for event in events]


def test_payloads_of_every_older_version_read_in_the_current_shape(store: EventStore) -> None:
    store.append(
        "probe-p",
        [
            _raw("UpcastingProbeNoted", {"probe_id": "v1", "why": "renamed since"}),
            _raw("UpcastingProbeNoted", {"probe_id": "v2", "reason": "no severity yet"}, schema_version=2),
            new_event(ProbeNoted(probe_id="v3", reason="current", severity="error")),
        ],
    )
    for read in (store.read_stream("probe-p"), store.read_all(), _bus(store.read_stream("probe-p"))):
        assert [e.payload() for e in read] == [
            ProbeNoted(probe_id="v1", reason="renamed since", severity="info"),
            ProbeNoted(probe_id="v2", reason="no severity yet", severity="info"),
            ProbeNoted(probe_id="v3", reason="current", severity="error"),
        ]
        assert {e.metadata["schema_version"] for e in read} == {3}
    with store.read_engine.connect() as conn:
        stored = conn.exec_driver_sql("SELECT data FROM events ORDER BY position").scalars().all()
    assert "why" in str(stored[0]), "the log keeps what was written"
    # The current shape is as strict as ever: an old field in a current event is refused.
    with pytest.raises(ValidationError, match="why"):
        ProbeNoted.model_validate({"probe_id": "x", "why": "old", "reason": "r", "severity": "info"})


def test_an_event_type_must_declare_an_upcaster_from_every_older_version() -> None:
    with pytest.raises(TypeError, match=r"UpcastingProbeGapped.*\[2\]"):

        class Gapped(Event):
            type_name = "UpcastingProbeGapped"
            category = "test"
            schema_version = 3
            upcasters = {1: _severity_added}


def test_an_old_run_is_read_by_the_projection_the_aggregate_and_scoring(store: EventStore) -> None:
    """A run submitted before RunSubmitted's version 2: its stored timeout multiplier is null."""
    old = submission("old-run", tasks=2, agents=1, attempts=1).model_dump(mode="json")
    old["execution"]["timeout_multiplier"] = None
    store.append("run-old-run", [_raw("RunSubmitted", old, actor="u1")])

    runner = ProjectionRunner(store, ReadModels())
    runner.create_tables()
    assert runner.catch_up() == 1
    with store.read_engine.connect() as conn:
        row = conn.execute(select(t.runs.c.submission, t.runs.c.expected)).one()
    assert row.submission["execution"]["timeout_multiplier"] == 1.0
    assert row.expected == 2

    history = store.read_stream("run-old-run")
    state = aggregate.fold("old-run", history)
    assert isinstance(state.submitted, RunSubmitted)
    assert state.submitted.execution.timeout_multiplier == 1.0
    decided = aggregate.decide_on_submitted(state)
    assert [e.type for e in decided] == [RunQueued.type_name]
    store.append("run-old-run", decided, expected_version=state.version)

    assert aggregate.fold("old-run", _bus(store.read_stream("run-old-run"))).status == "queued"
    scored = tally(store.read_stream("run-old-run"))
    assert scored is not None
    assert scored.submitted.execution.timeout_multiplier == 1.0


async def test_old_shapes_on_the_bus_are_read_in_the_current_shape(store: EventStore, tmp_path: Path) -> None:
    """What JetStream holds from before an upgrade (published as it was stored) and what the relay
    publishes now both reach a subscriber in the current shape."""
    old = submission("bus-run", tasks=1, agents=1, attempts=1).model_dump(mode="json")
    old["execution"]["timeout_multiplier"] = None
    store.append("run-bus-run", [_raw("RunSubmitted", old)])
    as_stored = store.read_stream("run-bus-run")[0]
    from_old_relay = StoredEvent(**{**as_stored.__dict__, "data": old, "metadata": {}})

    server = nats_server.start(tmp_path / "nats", nats_server.free_port())
    nc = await nats.connect(server.url())
    try:
        js = nc.jetstream()
        await ensure_streams(js)
        await js.publish(subject_of(RunSubmitted), encode_stored(from_old_relay))
        assert await Relay(store, nc).run_once() == 1
        subscription = await js.pull_subscribe(subject_of(RunSubmitted), durable="upcasting-test")
        messages = await subscription.fetch(2, timeout=10)
        assert [json.loads(m.data)["data"]["execution"]["timeout_multiplier"] for m in messages] == [
            None,
            1.0,
        ]
        for message in messages:
            received = decode_stored(message.data).payload()
            assert isinstance(received, RunSubmitted)
            assert received.execution.timeout_multiplier == 1.0
    finally:
        await nc.close()
        server.terminate()
        server.wait(timeout=10)
