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
        issues: list[dict[str, str]] | None = None,
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
