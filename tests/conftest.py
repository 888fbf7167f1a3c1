"""Shared fixtures: a real nats-server (the given NATS_URL, else one from the wheel) and real databases.

A test that needs a service or tool the machine lacks (Postgres, bubblewrap, chromium, docker-compose...)
fails, so a green run always means every test ran. A developer who knowingly lacks one may opt in to
skipping with REGATTA_TEST_ALLOW_SKIP=1 (never in CI: with CI=true a missing service always fails).
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from regatta import nats_server

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
ALLOW_SKIP = os.environ.get("REGATTA_TEST_ALLOW_SKIP", "").lower() in ("1", "true", "yes")
POSTGRES_ADMIN_URL = os.environ.get(
    "REGATTA_TEST_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


def unavailable(reason: str) -> None:
    """Fail for want of `reason`; skip only when a developer opted in outside CI."""
    if IN_CI:
        pytest.fail(f"{reason} (a skip is a failure in CI)")
    if not ALLOW_SKIP:
        pytest.fail(f"{reason} (set REGATTA_TEST_ALLOW_SKIP=1 to skip such tests instead)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def nats_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The admin user's URL of a nats-server that, like production, refuses anonymous clients."""
    if os.environ.get("NATS_URL"):
        yield os.environ["NATS_URL"]
        return
    server = nats_server.start(tmp_path_factory.mktemp("nats"), nats_server.free_port())
    yield server.url("admin")
    server.terminate()
    server.wait(timeout=10)


def _create_database() -> str:
    from sqlalchemy import create_engine, text

    name = f"regatta_test_{uuid.uuid4().hex[:10]}"
    try:
        engine = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        engine.dispose()
    except Exception as error:
        unavailable(f"Postgres is not reachable at {POSTGRES_ADMIN_URL}: {error}")
    return POSTGRES_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"


def _drop_database(url: str) -> None:
    from sqlalchemy import create_engine, text

    name = url.rsplit("/", 1)[1]
    engine = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    engine.dispose()


@pytest.fixture
def postgres_url() -> Iterator[str]:
    url = _create_database()
    yield url
    _drop_database(url)


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'events.db'}"
        return
    url = _create_database()
    yield url
    _drop_database(url)


@pytest.fixture(scope="session")
def bwrap_available() -> None:
    if subprocess.run(["which", "bwrap"], capture_output=True).returncode != 0:
        unavailable("bubblewrap (bwrap) is not installed")
