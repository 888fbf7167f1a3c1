"""Issue 16, finding 5: a run stored before non-finite numbers were refused (`"timeout_multiplier":
Infinity`, written to the log as null) loads, so scheduler and scoring stop failing on it forever.
RunSubmitted's upcaster to schema version 2 (events/runs.py) reads it with the default multiplier."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError
from regatta_shared.events import RunSubmitted, parse_event
from regatta_shared.events.codec import current_shape, decode_stored, encode_stored
from regatta_shared.events.envelope import StoredEvent

from tests.support.runs import submission


def _stored(data: dict, metadata: dict) -> StoredEvent:
    return StoredEvent(1, "e", "run-r", 1, "RunSubmitted", data, metadata, datetime.now(UTC))


def test_a_run_stored_with_a_non_finite_timeout_multiplier_loads_with_the_default() -> None:
    data = submission("r").model_dump(mode="json")
    data["execution"]["timeout_multiplier"] = None
    old = _stored(data, {"actor": "u"})  # written before RunSubmitted had a schema version: version 1
    for read in (current_shape(old), decode_stored(encode_stored(old))):
        loaded = read.payload()
        assert isinstance(loaded, RunSubmitted)
        assert loaded.execution.timeout_multiplier == 1.0
        assert read.metadata == {"actor": "u", "schema_version": 2}
    assert data["execution"]["timeout_multiplier"] is None, "the stored payload itself is left as it was"


def test_a_current_shape_submission_stays_strict() -> None:
    data = submission("r").model_dump(mode="json")
    data["execution"]["timeout_multiplier"] = None
    current = _stored(data, {"schema_version": 2})
    assert current_shape(current) is current
    with pytest.raises(ValidationError, match="timeout_multiplier"):
        current.payload()
    with pytest.raises(ValidationError, match="timeout_multiplier"):
        parse_event("RunSubmitted", data)
