"""The tests' own Postgres and NATS containers: reachable only as intended, and never left behind."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import docker
import docker.errors
import nats
import psycopg
import pytest
from nats.errors import Error as NatsError

from tests.conftest import unavailable
from tests.support import service_containers
from tests.support.service_containers import (
    BASE_IMAGE,
    LABEL_BOOT,
    LABEL_PID,
    LABEL_SERVICE,
    LABEL_STARTED,
    STALE_AFTER_SEC,
)


@pytest.fixture
def engine() -> docker.DockerClient:
    try:
        return service_containers.engine()
    except docker.errors.DockerException as error:
        unavailable(f"no Docker engine answers: {error}")
        raise


def _published(engine: docker.DockerClient, port: int) -> list[dict[str, str]]:
    """The host side of whichever service container publishes `port` on the host."""
    for container in engine.api.containers(filters={"label": LABEL_SERVICE}):  # no inspect: no race
        bindings = [
            {"HostIp": p.get("IP", ""), "HostPort": str(p["PublicPort"])}
            for p in container.get("Ports") or []
            if p.get("PublicPort") == port
        ]
        if bindings:
            return bindings
    raise AssertionError(f"no service container publishes {port}")


def test_the_session_postgres_is_a_container_on_loopback_that_wants_its_password(
    postgres_admin_url: str, engine: docker.DockerClient
) -> None:
    url = urlsplit(postgres_admin_url)
    assert url.hostname == "127.0.0.1" and url.port not in (None, 5432), postgres_admin_url
    assert [b["HostIp"] for b in _published(engine, url.port or 0)] == ["127.0.0.1"]
    with psycopg.connect(host="127.0.0.1", port=url.port, user="postgres", password=url.password) as conn:
        assert conn.execute("SHOW fsync").fetchone() == ("off",)
    for password in ("", "wrong"):
        with pytest.raises(psycopg.OperationalError, match="password"):
            psycopg.connect(host="127.0.0.1", port=url.port, user="postgres", password=password).close()


async def test_the_session_nats_is_a_container_on_loopback_that_refuses_anonymous_clients(
    nats_url: str, engine: docker.DockerClient
) -> None:
    url = urlsplit(nats_url)
    assert url.hostname == "127.0.0.1" and url.port not in (None, 4222), nats_url
    assert [b["HostIp"] for b in _published(engine, url.port or 0)] == ["127.0.0.1"]
    client = await nats.connect(nats_url)
    info = await client.jetstream().account_info()
    assert info.limits is not None  # JetStream is on
    await client.close()
    with pytest.raises(NatsError, match="Authorization Violation"):
        await nats.connect(f"nats://127.0.0.1:{url.port}", allow_reconnect=False, max_reconnect_attempts=0)


@pytest.fixture
def labelled(engine: docker.DockerClient) -> Iterator[list[docker.models.containers.Container]]:
    made: list[docker.models.containers.Container] = []
    yield made
    for container in made:
        with contextlib.suppress(docker.errors.NotFound):
            container.remove(force=True)


def test_the_sweep_removes_what_a_killed_run_left_and_keeps_live_runs(
    engine: docker.DockerClient, labelled: list[docker.models.containers.Container]
) -> None:
    try:
        engine.images.get(BASE_IMAGE)
    except docker.errors.ImageNotFound:
        unavailable(f"{BASE_IMAGE} is not on the engine (scripts/test-image.sh makes it)")
    live = service_containers.labels("sweep-probe")
    now = int(time.time())
    dead_pid = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1  # above any process id
    cases = {
        "live": live,
        "owner-gone": {**live, LABEL_PID: str(dead_pid)},
        "other-boot": {**live, LABEL_BOOT: "00000000-0000-0000-0000-000000000000"},
        "too-old": {**live, LABEL_STARTED: str(now - STALE_AFTER_SEC - 60)},
        "unreadable": {**live, LABEL_PID: "not-a-pid"},
    }
    names = {}
    for case, labels in cases.items():
        container = engine.containers.create(BASE_IMAGE, ["sleep", "300"], labels=labels, network_mode="none")
        labelled.append(container)
        names[case] = container.name
    removed = service_containers.sweep_stale(engine)
    probes = engine.api.containers(all=True, filters={"label": f"{LABEL_SERVICE}=sweep-probe"})
    left = {c["Names"][0].lstrip("/") for c in probes}
    assert set(removed) >= {names[c] for c in ("owner-gone", "other-boot", "too-old", "unreadable")}
    assert left == {names["live"]}, (removed, left)


def test_an_own_postgres_crashes_recovers_at_its_url_and_is_removed(
    engine: docker.DockerClient,
) -> None:
    from tests.support.own_postgres import OwnPostgres

    cluster = OwnPostgres()
    try:
        cluster.start()
        url = urlsplit(cluster.url)
        connect = {"host": "127.0.0.1", "port": url.port, "user": "postgres", "password": url.password}
        with psycopg.connect(**connect, autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (n int)")
            conn.execute("INSERT INTO kept VALUES (7)")
        survivor = psycopg.connect(**connect, autocommit=True)
        cluster.restart_immediately()
        with pytest.raises(psycopg.OperationalError):
            survivor.execute("SELECT 1")  # the crash ended every session
        survivor.close()
        with psycopg.connect(**connect) as conn:
            assert conn.execute("SELECT n FROM kept").fetchall() == [(7,)]
        assert "database system was interrupted" in cluster.container.logs().decode()
    finally:
        cluster.stop()
    assert not engine.containers.list(all=True, filters={"name": cluster.container.name})


def test_the_postgres_image_refuses_a_password_that_is_not_hex(engine: docker.DockerClient) -> None:
    image = service_containers.postgres_image(engine)
    for password in ("x'; DROP DATABASE postgres; --", ""):
        container = engine.containers.run(
            image, environment={"POSTGRES_PASSWORD": password}, network_mode="none", remove=False, detach=True
        )
        try:
            assert container.wait(timeout=60)["StatusCode"] == 2
            assert b"POSTGRES_PASSWORD must be lowercase hex" in container.logs()
        finally:
            container.remove(force=True)
