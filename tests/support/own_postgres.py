"""A Postgres server of the test's own, for tests that crash or restart the database.

The session's Postgres (tests/conftest.py) is shared by every test of the process: restarting it would
break them. A test that needs a database to crash starts its own container from the same image
(tests/support/service_containers.py), at a host port fixed for its life so its URL outlives restarts,
crashes that one, and removes it at the end.
"""

from __future__ import annotations

import contextlib
import secrets

import docker
import docker.errors

from regatta import nats_server
from tests.conftest import unavailable
from tests.support import service_containers


class OwnPostgres:
    def __init__(self) -> None:
        try:
            self.client = service_containers.engine()
            self.image = service_containers.postgres_image(self.client)
        except docker.errors.ImageNotFound:
            base = service_containers.BASE_IMAGE
            unavailable(f"{base} is not on the engine (scripts/test-image.sh makes it)")
        except docker.errors.DockerException as error:
            unavailable(f"an own Postgres runs in a container, and no Docker engine answers: {error}")
        self.port = nats_server.free_port()
        self.password = secrets.token_hex(16)
        self.url = f"postgresql+psycopg://postgres:{self.password}@127.0.0.1:{self.port}/postgres"
        self.container = self.client.containers.create(
            self.image,
            service_containers.POSTGRES_SETTINGS,
            name=service_containers.container_name("own-postgres"),
            labels=service_containers.labels("own-postgres"),
            environment={"POSTGRES_PASSWORD": self.password},
            ports={"5432/tcp": ("127.0.0.1", self.port)},
            shm_size="256m",
        )

    def _wait_ready(self, timeout: float = 60.0) -> None:
        service_containers.wait_until_accepting(self.container, timeout)

    def start(self) -> None:
        self.container.start()
        self._wait_ready()

    def restart_immediately(self) -> None:
        """A crash and recovery: SIGQUIT is Postgres' immediate shutdown, no checkpoint, as a power cut
        would leave it; the next start recovers from the WAL."""
        self.container.kill(signal="SIGQUIT")
        self.container.wait(timeout=60)
        self.start()

    def stop(self) -> None:
        with contextlib.suppress(docker.errors.NotFound):
            self.container.remove(force=True, v=True)
