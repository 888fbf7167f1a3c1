"""A job whose handling fails in the executor itself on every delivery (issue 28) is not redelivered
forever: at its last allowed delivery the attempt is reported `errored`, saying how often the executor
failed on it, and the job is settled. (On a stream of the test's own: JOBS is a work queue, which takes
no second consumer.)"""

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
from regatta_executor.attempt.trials import EnvironmentChoice
from regatta_executor.worker import Executor
from regatta_run_scheduler.scheduler import build_job
from regatta_shared.events import AttemptScheduled
from regatta_shared.ids import attempt_id, new_id
from regatta_shared.messaging.bus import REPORT_SUBJECT, TASKS_BUCKET, ensure_streams
from regatta_shared.messaging.consumer import Redeliver
from regatta_shared.messaging.jobs import AttemptReport

from tests.support.runs import submission
from tests.support.tasks import write_task

pytestmark = pytest.mark.timeout(90)


async def test_a_job_the_executor_fails_on_every_time_ends_errored_at_its_last_delivery(
    nats_url: str, tmp_path: Path
) -> None:
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    stream, subject = f"CRASHY-{new_id('s')}", f"crashy.{new_id('j')}"
    try:
        await ensure_streams(js)
        run_id = new_id("run")
        aid = attempt_id(run_id, 0, "t0", 0)
        scheduled = AttemptScheduled(run_id=run_id, attempt_id=aid, agent_index=0, task="t0", attempt_index=0)
        job = build_job(submission(run_id, tasks=1, agents=1, attempts=1), scheduled)
        reports: asyncio.Queue[AttemptReport] = asyncio.Queue()

        async def collect(msg: nats.aio.msg.Msg) -> None:
            report = AttemptReport.model_validate_json(msg.data)
            if report.run_id == run_id:
                await reports.put(report)

        await nc.subscribe(REPORT_SUBJECT, cb=collect)
        # The executor's own fault, the same on every delivery: it never opened its buckets (Executor.open),
        # so it fails in itself on each job before any attempt runs, and nothing the trial catches.
        executor = Executor(nc, tmp_path / "work", 1, EnvironmentChoice(), max_deliveries=3)

        await js.add_stream(name=stream, subjects=[subject])
        await js.publish(subject, job.model_dump_json().encode(), stream=stream)
        sub = await js.pull_subscribe(
            subject, durable="executors", stream=stream, config=ConsumerConfig(ack_wait=30.0)
        )
        for delivery in (1, 2):
            (msg,) = await sub.fetch(1, timeout=5)
            assert msg.metadata.num_delivered == delivery
            with pytest.raises(Redeliver):
                await executor.handle(msg)
            await msg.nak()
        assert reports.empty(), "a failed delivery reports nothing: the job comes back"

        (msg,) = await sub.fetch(1, timeout=5)
        assert msg.metadata.num_delivered == 3
        await executor.handle(msg)  # the last one: reported, and returns so the job is acked
        report = await asyncio.wait_for(reports.get(), timeout=10)
        assert (report.kind, report.outcome, report.attempt_id, report.delivery) == (
            "finished",
            "errored",
            aid,
            3,
        )
        assert report.exception_type == "ExecutorFailed"
        assert report.exception_message.startswith(
            "the executor failed on this attempt 3 times; the last time: "
        )
        await msg.ack()
        with pytest.raises(nats.errors.TimeoutError):
            await sub.fetch(1, timeout=1)

        # A job delivered past the bound (its executors died on every earlier delivery) is not run at all.
        await js.publish(subject, job.model_dump_json().encode(), stream=stream)
        for _ in range(3):
            (msg,) = await sub.fetch(1, timeout=5)
            await msg.nak()
        (msg,) = await sub.fetch(1, timeout=5)
        assert msg.metadata.num_delivered == 4
        await executor.handle(msg)
        report = await asyncio.wait_for(reports.get(), timeout=10)
        assert report.outcome == "errored" and report.delivery == 4
        assert report.exception_message == "the executor failed on this attempt 3 times"
    finally:
        with contextlib.suppress(Exception):
            await js.delete_stream(stream)
        await nc.close()


async def test_a_job_delivered_again_while_its_attempt_runs_here_is_not_run_twice(
    nats_url: str, tmp_path: Path
) -> None:
    """A heartbeat missed on a loaded host (an event loop busy importing a harness, say) has JetStream
    deliver a running attempt's job again, often to the same executor's free slot. It must join the
    copy already running rather than start the attempt a second time: two agents on one scripted or
    paid model took turns from each other's conversation, and the one graded had done half the work."""
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    stream, subject = f"TWICE-{new_id('s')}", f"twice.{new_id('j')}"
    try:
        await ensure_streams(js)
        task = write_task(tmp_path / "tasks", "t0", solve="sleep 4\necho done >> /app/out.txt")
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w:gz") as tar:
            tar.add(task, arcname=".")
        digest = "sha256:" + hashlib.sha256(archive.getvalue()).hexdigest()
        await (await js.object_store(TASKS_BUCKET)).put(digest, archive.getvalue())

        run_id = new_id("run")
        aid = attempt_id(run_id, 0, "t0", 0)
        scheduled = AttemptScheduled(run_id=run_id, attempt_id=aid, agent_index=0, task="t0", attempt_index=0)
        job = build_job(submission(run_id, tasks=1, agents=1, attempts=1), scheduled)
        job = job.model_copy(update={"task_digest": digest})
        reports: list[AttemptReport] = []

        async def collect(msg: nats.aio.msg.Msg) -> None:
            report = AttemptReport.model_validate_json(msg.data)
            if report.run_id == run_id:
                reports.append(report)

        await nc.subscribe(REPORT_SUBJECT, cb=collect)
        executor = Executor(nc, tmp_path / "work", 2, EnvironmentChoice())
        await executor.open()

        await js.add_stream(name=stream, subjects=[subject])
        await js.publish(subject, job.model_dump_json().encode(), stream=stream)
        # No heartbeat here: the job comes back after ack_wait while its first delivery still runs.
        sub = await js.pull_subscribe(
            subject, durable="executors", stream=stream, config=ConsumerConfig(ack_wait=1.0)
        )
        (first,) = await sub.fetch(1, timeout=5)
        running = asyncio.create_task(executor.handle(first))
        (second,) = await sub.fetch(1, timeout=10)
        assert second.metadata.num_delivered == 2 and not running.done()
        await asyncio.wait_for(executor.handle(second), timeout=60)  # returns once the first copy has ended
        assert running.done()
        await running

        await asyncio.sleep(0.5)  # the last report's delivery to this test's subscription
        finished = [r for r in reports if r.kind == "finished"]
        assert [(r.outcome, r.delivery) for r in finished] == [("passed", 1)], reports
        assert {r.delivery for r in reports} == {1}, "the second delivery ran nothing and reported nothing"
    finally:
        with contextlib.suppress(Exception):
            await js.delete_stream(stream)
        await nc.close()
