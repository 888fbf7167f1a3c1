"""The published event contracts (issue 29): docs/asyncapi.json is the AsyncAPI 3.0 document generated
from the event classes and the bus layout, valid against the AsyncAPI 3.0 JSON schema (from its publisher's
npm package @asyncapi/specs, installed by scripts/setup.sh), current, and naming every event class with its
own schema on the subject the relay publishes it on."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

import jsonschema
import pytest
from regatta_relay.relay import subject_for
from regatta_shared import events
from regatta_shared.events import Event
from regatta_shared.events.envelope import StoredEvent
from regatta_shared.messaging.asyncapi import (
    SCHEMAS,
    asyncapi_document,
    core_messages,
    event_classes,
    render,
    work_queue_messages,
)
from regatta_shared.messaging.bus import CANCEL_SUBJECT_PREFIX, CLAIM_SUBJECT_PREFIX, EVENTS_STREAM, STREAMS
from regatta_shared.messaging.live import LIVE_STREAM_CONFIG, LiveChunk, live_subject
from regatta_shared.messaging.nudge import NUDGE_SUBJECT

from tests.conftest import ROOT, unavailable

COMMITTED = ROOT / "docs" / "asyncapi.json"
SPEC = ROOT / ".tools/asyncapi/node_modules/@asyncapi/specs/schemas/3.0.0-without-$id.json"


@pytest.fixture(scope="module")
def validator() -> Any:
    if not SPEC.is_file():
        unavailable(
            f"the AsyncAPI 3.0 JSON schema is not at {SPEC} (run REGATTA_SETUP_TEST_DEPS=1 scripts/setup.sh)"
        )
    schema = json.loads(SPEC.read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def test_the_document_is_valid_asyncapi_3(validator: Any) -> None:
    document = asyncapi_document()
    assert document["asyncapi"] == "3.0.0"
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(document)]
    assert errors == []
    # The schema does refuse a broken document: an AsyncAPI 2 style operation is not 3.0.
    broken = copy.deepcopy(document)
    next(iter(broken["operations"].values()))["action"] = "publish"
    assert list(validator.iter_errors(broken))


def test_the_committed_copy_is_current() -> None:
    assert COMMITTED.read_text() == render(), (
        "docs/asyncapi.json is stale: run `python -m regatta_shared.messaging.asyncapi docs/asyncapi.json`"
    )


def _schema_of(model: type[Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    schema = model.model_json_schema(ref_template=SCHEMAS + "{model}")
    return schema, schema.pop("$defs", {})


def test_every_event_class_is_in_it_with_its_schema_on_the_relays_subject() -> None:
    document = asyncapi_document()
    schemas = document["components"]["schemas"]
    declared = [getattr(events, name) for name in events.__all__]
    classes = {c for c in declared if isinstance(c, type) and issubclass(c, Event) and c is not Event}
    assert set(event_classes()) == classes, "every exported event class, and no other"
    for cls in classes:
        channel = document["channels"][cls.type_name]
        stored = StoredEvent(1, "e", "x-1", 1, cls.type_name, {}, {}, datetime.now(UTC))
        assert channel["address"] == subject_for(stored), cls
        assert channel["x-stream"] == EVENTS_STREAM
        message = document["components"]["messages"][cls.type_name]
        assert message["x-schema-version"] == cls.schema_version
        data = message["payload"]["allOf"][1]["properties"]
        assert data["type"] == {"const": cls.type_name}
        assert data["data"] == {"$ref": SCHEMAS + cls.__name__}
        own, nested = _schema_of(cls)
        assert schemas[cls.__name__] == own, cls
        for name, schema in nested.items():
            assert schemas[name] == schema, (cls, name)
        assert f"send{cls.type_name}" in document["operations"]


def test_every_stream_and_work_queue_message_is_in_it() -> None:
    document = asyncapi_document()
    streams = {channel["x-stream"] for channel in document["channels"].values() if "x-stream" in channel}
    assert streams == {stream.name for stream in (*STREAMS, LIVE_STREAM_CONFIG)}
    for name, (stream, subject, model) in work_queue_messages().items():
        channel = document["channels"][name]
        assert (channel["address"], channel["x-stream"]) == (subject, stream)
        own, nested = _schema_of(model)
        assert document["components"]["schemas"][model.__name__] == own
        assert all(document["components"]["schemas"][n] == s for n, s in nested.items())
    for stream in STREAMS:
        prefix = stream.subjects[0].removesuffix(">")
        assert all(
            c["address"].startswith(prefix)
            for c in document["channels"].values()
            if c.get("x-stream") == stream.name
        )


def test_the_core_subjects_are_in_it_as_their_publishers_address_them() -> None:
    """Live output, the cancel and claim hints and the store's commit nudge: each channel's address,
    its parameters filled in, is the subject the code publishes on."""
    document = asyncapi_document()
    channels = document["channels"]
    assert set(core_messages()) <= set(channels)

    def filled(name: str, **values: str) -> str:
        assert set(channels[name].get("parameters", {})) == set(values), name
        return channels[name]["address"].format(**values)

    assert filled("LiveChunk", run_id="r1", attempt_id="a1") == live_subject("r1", "a1")
    assert channels["LiveChunk"]["x-stream"] == LIVE_STREAM_CONFIG.name
    assert filled("RunCancelAnnounced", run_id="r1") == f"{CANCEL_SUBJECT_PREFIX}.r1"
    assert filled("AttemptClaimed", run_id="r1") == f"{CLAIM_SUBJECT_PREFIX}.r1"
    assert filled("StoreCommitted") == NUDGE_SUBJECT
    own, nested = _schema_of(LiveChunk)
    assert document["components"]["schemas"][LiveChunk.__name__] == own
    assert all(document["components"]["schemas"][n] == s for n, s in nested.items())
    for name in core_messages():
        assert f"send{name}" in document["operations"]
