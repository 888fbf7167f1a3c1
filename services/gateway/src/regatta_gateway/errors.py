"""What the gateway's service layer refuses, as kinds: the caller learns *why* (not found, a conflict,
an invalid field...) and http/errors.py alone decides the status code and body each kind gets.

Every refusal carries the message for a person, and optionally a stable `code`, the `field` at fault,
the `issues` of a multi-field validation and extra keys the body shows (`max_bytes`, `kind`...).
"""

from __future__ import annotations

from typing import Any


class Refused(Exception):
    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        field: str | None = None,
        issues: list[dict[str, Any]] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.field = field
        self.issues = issues
        self.extra = extra


class Invalid(Refused):
    """A value the request gave is malformed or not allowed: `field` names it."""


class Unauthorized(Refused):
    """No credentials, or credentials that identify no one (unknown, revoked, expired)."""


class Forbidden(Refused):
    """The principal is known but may not do this."""


class NotFound(Refused):
    """No such thing in the principal's scope (one answer for absent and not visible)."""


class Conflict(Refused):
    """The request is valid but contradicts the current state (a name taken, a concurrent change)."""


class TooLarge(Refused):
    """A body or value over its size limit."""


class Unsupported(Refused):
    """A request in a form the service does not take (a body's media type)."""


class Unavailable(Refused):
    """A dependency the request needs (a registry) cannot be reached now; retrying later may work."""


class Broken(Refused):
    """Stored data the service relies on is inconsistent (a ciphertext that does not open)."""
