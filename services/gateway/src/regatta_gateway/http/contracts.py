"""`GET /asyncapi.json`: the AsyncAPI 3.0 document of the bus's streams, subjects and event schemas
(regatta_shared.messaging.asyncapi). Public like /openapi.json: it describes contracts and holds no data."""

from __future__ import annotations

from functools import cache
from typing import Any

from fastapi import APIRouter
from regatta_shared.messaging.asyncapi import asyncapi_document

router = APIRouter(tags=["contracts"])


@cache
def _document() -> dict[str, Any]:
    return asyncapi_document()


@router.get("/asyncapi.json")
def asyncapi() -> dict[str, Any]:
    return _document()
