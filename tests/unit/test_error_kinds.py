"""The service layer's refusal kinds (regatta_gateway.errors) and their one mapping to HTTP (http/errors.py):
every kind has its status, and the body is the contract's flat shape (§2.5)."""

from __future__ import annotations

import inspect

from regatta_gateway import errors
from regatta_gateway.http.errors import STATUS, body, status_of


def test_every_kind_the_service_layer_raises_has_one_status() -> None:
    kinds = {
        kind
        for _, kind in inspect.getmembers(errors, inspect.isclass)
        if issubclass(kind, errors.Refused) and kind is not errors.Refused
    }
    assert kinds == set(STATUS)
    assert len(set(STATUS.values())) == len(STATUS)
    assert status_of(errors.Invalid("x")) == 400 and status_of(errors.Conflict("x")) == 409
    assert status_of(errors.Unauthorized("x")) == 401 and status_of(errors.Forbidden("x")) == 403


def test_the_body_is_flat_and_shows_only_what_the_refusal_carries() -> None:
    assert body(errors.NotFound("No such run")) == {"error": "No such run", "message": "No such run"}
    refusal = errors.TooLarge(
        "body is too large", code="PAYLOAD_TOO_LARGE", field="(body)", issues=[], max_bytes=10
    )
    assert body(refusal) == {
        "error": "body is too large",
        "message": "body is too large",
        "code": "PAYLOAD_TOO_LARGE",
        "field": "(body)",
        "issues": [],
        "max_bytes": 10,
    }
