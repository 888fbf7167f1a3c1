"""Fixtures of the integration tests (tests/conftest.py provides database_url, nats_url, …)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from regatta_shared.eventstore import EventStore


@pytest.fixture
def store(database_url: str) -> Iterator[EventStore]:
    """An event store with its schema, on SQLite and on Postgres (database_url is parametrised)."""
    store = EventStore(database_url)
    store.create_schema()
    yield store
    store.dispose()
