"""One attempt's job run the way an executor runs it: the task's archive in the task store, the job on a
JetStream stream of the test's own (JOBS is a work queue, which takes no second consumer), handed to
`Executor.handle`, and the reports it publishes on REPORTS."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

import docker
import nats
import pytest
from nats.js.api import ConsumerConfig
from regatta_executor.environments.choice import EnvironmentChoice
from regatta_executor.worker import Executor
from regatta_run_scheduler.scheduler import build_job
from regatta_shared.events import AttemptScheduled
from regatta_shared.ids import attempt_id, new_id
from regatta_shared.messaging.bus import REPORT_SUBJECT, TASKS_BUCKET, ensure_streams
from regatta_shared.messaging.jobs import AttemptJob, AttemptReport

from tests.integration.container_support import LOCAL_IMAGES, containers_of
from tests.integration.local_environment_support import require_sandbox_host, sandboxes_dir
from tests.support.runs import submission

ENVIRONMENTS = ["local", "container"]


def environment_choice(kind: str, work: Path, monkeypatch: pytest.MonkeyPatch) -> EnvironmentChoice:
    """`local` or `container` as the executor is configured for them (the machine checked first)."""
    if kind == "local":
        require_sandbox_host(monkeypatch)
        return EnvironmentChoice("local", {"sandbox_dir": str(sandboxes_dir(work))})
    from tests.integration.container_support import require_engine

    require_engine(monkeypatch)
    return EnvironmentChoice("container", {"state_dir": str(work / "state"), "local_images": LOCAL_IMAGES})


@dataclass
class JobRun:
    job: AttemptJob
    reports: list[AttemptReport] = field(default_factory=list)

    @property
    def finished(self) -> list[AttemptReport]:
        return [report for report in self.reports if report.kind == "finished"]


async def run_job(
    nats_url: str,
    work: Path,
    environment: EnvironmentChoice,
    task: Path,
    *,
    harness: str = "oracle",
    env: dict[str, str] | None = None,
) -> JobRun:
    """The task's attempt as one delivery of its job: `handle` must settle it (return, so the job is
    acked) with a finished report, as it does for any outcome but a fault of the executor itself."""
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    stream, subject = f"JOB-{new_id('s')}", f"job.{new_id('j')}"
    try:
        await ensure_streams(js)
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w:gz") as tar:
            tar.add(task, arcname=".")
        digest = "sha256:" + hashlib.sha256(archive.getvalue()).hexdigest()
        await (await js.object_store(TASKS_BUCKET)).put(digest, archive.getvalue())

        run_id = new_id("run")
        submitted = submission(run_id, tasks=1, agents=1, attempts=1)
        agent = submitted.agents[0].model_copy(update={"harness": harness})
        submitted = submitted.model_copy(update={"agents": [agent], "env": env or {}})
        aid = attempt_id(run_id, 0, "t0", 0)
        scheduled = AttemptScheduled(run_id=run_id, attempt_id=aid, agent_index=0, task="t0", attempt_index=0)
        job = build_job(submitted, scheduled).model_copy(update={"task_digest": digest})
        done = JobRun(job)

        async def collect(msg: nats.aio.msg.Msg) -> None:
            report = AttemptReport.model_validate_json(msg.data)
            if report.run_id == run_id:
                done.reports.append(report)

        await nc.subscribe(REPORT_SUBJECT, cb=collect)
        executor = Executor(nc, work / "executor", 1, environment, max_deliveries=3)
        await executor.open()
        await js.add_stream(name=stream, subjects=[subject])
        await js.publish(subject, job.model_dump_json().encode(), stream=stream)
        sub = await js.pull_subscribe(
            subject, durable="executors", stream=stream, config=ConsumerConfig(ack_wait=60.0)
        )
        (msg,) = await sub.fetch(1, timeout=5)
        assert msg.metadata.num_delivered == 1
        await executor.handle(msg)  # a Redeliver here: the executor failed on the job and wants it back
        await msg.ack()
        for _ in range(100):  # the report's way back to this subscription
            if done.finished:
                break
            await asyncio.sleep(0.1)
        return done
    finally:
        with contextlib.suppress(Exception):
            await js.delete_stream(stream)
        await nc.close()


def containers_left(kind: str, job: AttemptJob) -> list[str]:
    """The containers of the job's attempt on the engine (none for `local`)."""
    return containers_of(docker.from_env(), job.attempt_id) if kind == "container" else []
