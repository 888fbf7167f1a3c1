"""Fixtures of the integration tests (tests/conftest.py provides database_url, nats_url, …)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from regatta_shared.eventstore import EventStore


@pytest.fixture
def store(database_url: str) -> Iterator[EventStore]:
    """An event store with its schema, on SQLite and on Postgres (database_url is parametrised)."""
    store = EventStore(database_url)
    store.create_schema()
    yield store
    store.dispose()


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> docker.DockerClient:
    """The machine's Docker engine with the test base image (missing: the test fails in CI)."""
    from tests.integration.container_support import require_engine

    return require_engine(monkeypatch)


@pytest.fixture
def built_images_removed(tmp_path: Path) -> Iterator[None]:
    """Task images that attempts with a state folder under tmp_path built are removed afterwards."""
    from tests.integration.container_support import images_built_are_removed

    with images_built_are_removed(tmp_path):
        yield
