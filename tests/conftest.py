"""Shared fixtures: real databases and a real nats-server, the tests' own.

Postgres and NATS run in containers of this test process (tests/support/service_containers.py), so a
run needs a Docker engine and touches none of the machine's own servers. A developer may point the
tests at a server of their own instead: REGATTA_TEST_POSTGRES (a superuser's URL of a database the
tests may create databases beside) and NATS_URL (a user allowed everything).

A test that needs a service or tool the machine lacks (a Docker engine, bubblewrap, chromium,
docker-compose...) fails, so a green run always means every test ran. A developer who knowingly lacks
one may opt in to skipping with REGATTA_TEST_ALLOW_SKIP=1 (never in CI: with CI=true a missing service
always fails).
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.support.service_containers import Running

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
ALLOW_SKIP = os.environ.get("REGATTA_TEST_ALLOW_SKIP", "").lower() in ("1", "true", "yes")


def unavailable(reason: str) -> None:
    """Fail for want of `reason`; skip only when a developer opted in outside CI."""
    if IN_CI:
        pytest.fail(f"{reason} (a skip is a failure in CI)")
    if not ALLOW_SKIP:
        pytest.fail(f"{reason} (set REGATTA_TEST_ALLOW_SKIP=1 to skip such tests instead)")
    pytest.skip(reason)


_swept = False


def _service_container(what: str, start: Callable[[], Running]) -> Running:
    """`start()`ed, after removing the service containers that killed test runs left behind."""
    import docker.errors

    from tests.support import service_containers

    global _swept
    try:
        client = service_containers.engine()
        if not _swept:
            service_containers.sweep_stale(client)
            _swept = True
        client.images.get(service_containers.BASE_IMAGE)
    except docker.errors.ImageNotFound:
        unavailable(f"{service_containers.BASE_IMAGE} is not on the engine (scripts/test-image.sh makes it)")
    except docker.errors.DockerException as error:
        unavailable(f"the tests' {what} runs in a container, and no Docker engine answers: {error}")
    return start()


@pytest.fixture(scope="session")
def nats_url() -> Iterator[str]:
    """The admin user's URL of a nats-server that, like production, refuses anonymous clients."""
    if os.environ.get("NATS_URL"):
        yield os.environ["NATS_URL"]
        return
    from tests.support.service_containers import start_nats

    server = _service_container("NATS", start_nats)
    yield server.url
    server.stop()


@pytest.fixture(scope="session")
def postgres_admin_url() -> Iterator[str]:
    """A superuser's URL of the session's Postgres server (its `postgres` database)."""
    if os.environ.get("REGATTA_TEST_POSTGRES"):
        yield os.environ["REGATTA_TEST_POSTGRES"]
        return
    from tests.support.service_containers import start_postgres

    server = _service_container("Postgres", start_postgres)
    yield server.url
    server.stop()


def _create_database(admin_url: str) -> str:
    from sqlalchemy import create_engine, text

    name = f"regatta_test_{uuid.uuid4().hex[:10]}"
    try:
        engine = create_engine(admin_url, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        engine.dispose()
    except Exception as error:
        unavailable(f"Postgres is not reachable at {admin_url}: {error}")
    return admin_url.rsplit("/", 1)[0] + f"/{name}"


def _drop_database(admin_url: str, url: str) -> None:
    from sqlalchemy import create_engine, text

    name = url.rsplit("/", 1)[1]
    engine = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    engine.dispose()


@pytest.fixture
def postgres_url(postgres_admin_url: str) -> Iterator[str]:
    """A fresh database of its own on the session's Postgres, dropped at the end."""
    url = _create_database(postgres_admin_url)
    yield url
    _drop_database(postgres_admin_url, url)


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'events.db'}"
        return
    # Asked for here, not as a parameter: the SQLite half must not wait for a Postgres container.
    admin_url = request.getfixturevalue("postgres_admin_url")
    url = _create_database(admin_url)
    yield url
    _drop_database(admin_url, url)


@pytest.fixture(scope="session")
def bwrap_available() -> None:
    if subprocess.run(["which", "bwrap"], capture_output=True).returncode != 0:
        unavailable("bubblewrap (bwrap) is not installed")
