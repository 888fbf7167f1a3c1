"""Responses the routes build themselves."""

from __future__ import annotations

from starlette.responses import Response


class JSONBytes(Response):
    """A JSON response whose body is serialised already (the routes' dict goes through pydantic)."""

    media_type = "application/json"
