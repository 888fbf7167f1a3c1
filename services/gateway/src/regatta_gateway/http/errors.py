"""Flat error bodies (contract §2.5): message, error, code, field, issues."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        field: str | None = None,
        issues: list[dict[str, Any]] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.field = field
        self.issues = issues
        self.extra = extra

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"error": self.message, "message": self.message}
        if self.code:
            body["code"] = self.code
        if self.field:
            body["field"] = self.field
        if self.issues is not None:
            body["issues"] = self.issues
        body.update(self.extra)
        return body


def request_error(error: Any) -> ApiError:
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
    return ApiError(
        400,
        f"Invalid request: {first['key']}: {first['message']}",
        code="VALIDATION",
        field=first["key"],
        issues=issues,
    )
