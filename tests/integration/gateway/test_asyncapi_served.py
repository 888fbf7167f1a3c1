"""The gateway serves the AsyncAPI document of the bus (regatta_shared.messaging.asyncapi) at /asyncapi.json,
without a token, as /openapi.json is served: contracts, no data."""

from __future__ import annotations

from regatta_shared.messaging.asyncapi import asyncapi_document

from .conftest import Gateway


def test_the_asyncapi_document_is_served_without_a_token(pg_gateway: Gateway) -> None:
    response = pg_gateway.client.get("/asyncapi.json")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert response.json() == asyncapi_document()
    assert "RescoreRequested" in response.json()["channels"]
