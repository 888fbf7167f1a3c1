"""Flat error bodies (contract §2.5): message, error, code, field, issues; and the one mapping from the
service layer's refusal kinds (regatta_gateway.errors) to status codes."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse

from regatta_gateway.errors import (
    Broken,
    Conflict,
    Forbidden,
    Invalid,
    NotFound,
    Refused,
    TooLarge,
    Unauthorized,
    Unavailable,
    Unsupported,
)

STATUS: dict[type[Refused], int] = {
    Invalid: 400,
    Unauthorized: 401,
    Forbidden: 403,
    NotFound: 404,
    Conflict: 409,
    TooLarge: 413,
    Unsupported: 415,
    Broken: 500,
    Unavailable: 503,
}


def status_of(error: Refused) -> int:
    return next(STATUS[kind] for kind in type(error).__mro__ if kind in STATUS)


def body(error: Refused) -> dict[str, Any]:
    shown: dict[str, Any] = {"error": error.message, "message": error.message}
    if error.code:
        shown["code"] = error.code
    if error.field:
        shown["field"] = error.field
    if error.issues is not None:
        shown["issues"] = error.issues
    shown.update(error.extra)
    return shown


def response(error: Refused) -> JSONResponse:
    return JSONResponse(body(error), status_code=status_of(error))


def request_error(error: Any) -> Invalid:
    """FastAPI's validation errors as our flat 400 body, naming each field (not FastAPI's 422 shape)."""
    issues = []
    for item in error.errors():
        loc = tuple(item.get("loc", ()))
        location = [str(part) for part in loc if part not in ("body", "query", "path", "header")]
        # Malformed JSON is located by character offset, and a body of the wrong type by ("body",):
        # either way the field at fault is the body itself.
        if item.get("type") == "json_invalid" or loc == ("body",):
            location = ["(body)"]
        issues.append({"key": ".".join(location) or "(request)", "message": str(item.get("msg", "invalid"))})
    first = issues[0] if issues else {"key": "(request)", "message": "invalid request"}
    return Invalid(
        f"Invalid request: {first['key']}: {first['message']}",
        code="VALIDATION",
        field=first["key"],
        issues=issues,
    )
