"""One run-status vocabulary (regatta_shared.runs.status): the fold sets only its words, its groups split
them without overlap, and the API's filter and the web UI list exactly those words, in its order."""

from __future__ import annotations

from regatta_gateway.app import create_app
from regatta_shared.runs import STATUS_BY_EVENT, RunFold
from regatta_shared.runs.status import ACTIVE, ENDED_EARLY, NOT_STARTED, RUN_STATUSES, TERMINAL
from regatta_shared.settings import Settings


def test_the_fold_sets_only_statuses_of_the_vocabulary_and_every_one_of_them() -> None:
    assert set(STATUS_BY_EVENT.values()) == set(RUN_STATUSES)
    assert RunFold("r").status in NOT_STARTED


def test_active_and_terminal_split_the_statuses() -> None:
    assert set(RUN_STATUSES) == ACTIVE | TERMINAL and not ACTIVE & TERMINAL
    assert NOT_STARTED < ACTIVE and ENDED_EARLY < TERMINAL


def test_the_runs_filter_of_the_api_takes_exactly_the_vocabulary_in_its_order() -> None:
    schema = create_app(Settings()).openapi()  # type: ignore[call-arg]
    parameters = schema["paths"]["/api/v1/runs"]["get"]["parameters"]
    status = next(p for p in parameters if p["name"] == "status")["schema"]
    listed = next(option for option in status["anyOf"] if option.get("type") == "string")
    assert tuple(listed["enum"]) == RUN_STATUSES
