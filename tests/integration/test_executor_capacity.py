"""An executor host too small for a task hands its job back without it counting as a failed delivery,
and ends its attempt errored once no live host can hold it (issue 39). Real executors' `handle` on a
stream of the test's own (JOBS is a work queue, which takes no second consumer), real KV buckets."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import tarfile
from pathlib import Path

import nats
import pytest
from nats.js.api import ConsumerConfig
from regatta_executor.capacity import HostCapacity
from regatta_executor.hosts import Hosts, live_hosts
from regatta_executor.trials import EnvironmentChoice
from regatta_executor.worker import Executor
from regatta_run_scheduler.scheduler import build_job
from regatta_shared.bus import REPORT_SUBJECT, TASKS_BUCKET, ensure_streams
from regatta_shared.consumer import Redeliver
from regatta_shared.events import AttemptScheduled
from regatta_shared.ids import attempt_id, new_id
from regatta_shared.jobs import AttemptJob, AttemptReport

from tests.integration.local_environment_support import require_sandbox_host
from tests.support.runs import submission
from tests.support.tasks import write_task

pytestmark = pytest.mark.timeout(120)


def capacity(name: str, cpus: float) -> HostCapacity:
    return HostCapacity(
        executor_id=name,
        host="test",
        environment="local",
        slots=1,
        cpus=cpus,
        memory_mb=4096,
        storage_mb=4096,
    )


async def two_cpu_job(js, tmp_path: Path) -> AttemptJob:
    task = write_task(tmp_path / "tasks", "t0")
    with (task / "task.toml").open("a") as toml:
        toml.write("cpus = 2\n")
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz") as tar:
        tar.add(task, arcname=".")
    digest = "sha256:" + hashlib.sha256(archive.getvalue()).hexdigest()
    await (await js.object_store(TASKS_BUCKET)).put(digest, archive.getvalue())
    run_id = new_id("run")
    scheduled = AttemptScheduled(
        run_id=run_id, attempt_id=attempt_id(run_id, 0, "t0", 0), agent_index=0, task="t0", attempt_index=0
    )
    job = build_job(submission(run_id, tasks=1, agents=1, attempts=1), scheduled)
    return job.model_copy(update={"task_digest": digest})


async def test_hand_backs_are_no_failed_deliveries_and_the_host_that_can_runs_the_job(
    nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_sandbox_host(monkeypatch)
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    stream, subject = f"SIZED-{new_id('s')}", f"sized.{new_id('j')}"
    small_name, big_name = new_id("small"), new_id("big")
    stop = asyncio.Event()
    try:
        await ensure_streams(js)
        job = await two_cpu_job(js, tmp_path)
        reports: asyncio.Queue[AttemptReport] = asyncio.Queue()

        async def collect(msg: nats.aio.msg.Msg) -> None:
            report = AttemptReport.model_validate_json(msg.data)
            if report.run_id == job.run_id:
                await reports.put(report)

        await nc.subscribe(REPORT_SUBJECT, cb=collect)
        small = Executor(
            nc,
            tmp_path / "small",
            1,
            EnvironmentChoice(),
            max_deliveries=2,
            hosts=Hosts(js, capacity(small_name, 1), 0),
        )
        big_hosts = Hosts(js, capacity(big_name, 2), 0)
        big = Executor(nc, tmp_path / "big", 1, EnvironmentChoice(), max_deliveries=2, hosts=big_hosts)
        await small.open()
        await big.open()
        announcing = asyncio.create_task(big_hosts.announce(stop))
        deadline = asyncio.get_running_loop().time() + 10
        while big_name not in {h.executor_id for h in await live_hosts(js, big_hosts.hosts)}:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.05)

        await js.add_stream(name=stream, subjects=[subject])
        await js.publish(subject, job.model_dump_json().encode(), stream=stream)
        sub = await js.pull_subscribe(
            subject, durable="executors", stream=stream, config=ConsumerConfig(ack_wait=60.0)
        )
        # The small host hands it back more often than max_deliveries allows failures (the big host is
        # live, so however long it waited, it waits), and reports nothing.
        for delivery in range(1, 5):
            (msg,) = await sub.fetch(1, timeout=5)
            assert msg.metadata.num_delivered == delivery
            with pytest.raises(Redeliver):
                await small.handle(msg)
            await msg.nak()
        assert reports.empty()
        assert await small.hosts.handed_back(job) == 4

        (msg,) = await sub.fetch(1, timeout=5)
        assert msg.metadata.num_delivered == 5
        await big.handle(msg)
        await msg.ack()
        report = await asyncio.wait_for(reports.get(), timeout=30)
        while report.kind != "finished":
            report = await asyncio.wait_for(reports.get(), timeout=30)
        assert (report.outcome, report.executor_id, report.delivery) == ("passed", big.id, 5), report

        # The big host gone (withdrawn) and the small one's wait limit 0: the next copy of the job ends
        # errored at once, naming the CPUs, and is settled (acked) rather than handed back.
        stop.set()
        await announcing
        await js.publish(
            subject, job.model_copy(update={"rerun": 1}).model_dump_json().encode(), stream=stream
        )
        (msg,) = await sub.fetch(1, timeout=5)
        await small.handle(msg)
        report = await asyncio.wait_for(reports.get(), timeout=10)
        assert (report.kind, report.outcome, report.exception_type) == (
            "finished",
            "errored",
            "NoCapacityError",
        )
        assert report.exception_message.startswith(
            f"no executor host has 2 CPUs (largest: 1 CPU; hosts: {small_name} "
        )
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await js.delete_stream(stream)
        await nc.close()


def test_capacity_is_measured_where_the_sandboxes_run(engine) -> None:
    """`container`: the engine's CPUs and memory (DOCKER_HOST's engine may be another machine); `local`:
    this host's; a sandbox elsewhere (a cloud provider): the operator's ceilings, not this small VM's."""
    from regatta_executor.capacity import measured_cpus, measured_memory_mb, sandbox_host_figures
    from regatta_shared.ceilings import Ceilings
    from regatta_shared.settings import Settings

    ceilings = Ceilings.from_settings(Settings(REGATTA_MAX_CPUS=64, REGATTA_MAX_MEMORY_MB=262_144))
    info = engine.info()
    assert sandbox_host_figures("container", False, ceilings) == (
        float(info["NCPU"]),
        info["MemTotal"] // 2**20,
    )
    assert sandbox_host_figures("local", True, ceilings) == (measured_cpus(), measured_memory_mb())
    assert sandbox_host_figures("daytona", False, ceilings) == (64.0, 262_144)
