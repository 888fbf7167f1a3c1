"""Issue 16, finding 5: a run stored before non-finite numbers were refused (`"timeout_multiplier":
Infinity`, written to the log as null) loads, so scheduler and scoring stop failing on it forever."""

from __future__ import annotations

from regatta_shared.events import RunSubmitted, parse_event

from tests.support.runs import submission


def test_a_run_stored_with_a_non_finite_timeout_multiplier_loads_with_the_default() -> None:
    data = submission("r").model_dump(mode="json")
    data["execution"]["timeout_multiplier"] = None
    loaded = parse_event("RunSubmitted", data)
    assert isinstance(loaded, RunSubmitted)
    assert loaded.execution.timeout_multiplier == 1.0
