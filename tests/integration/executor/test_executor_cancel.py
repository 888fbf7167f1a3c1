"""A run stopped at the very moment its executor takes an attempt: the attempt is reported cancelled and
the executor's slot lives on (worker.py, Executor._run_attempt); a job that does not parse is dropped."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import nats
import pytest
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig
from regatta_executor.attempt.trials import EnvironmentChoice
from regatta_executor.worker import Executor
from regatta_run_scheduler.scheduler import build_job
from regatta_shared.events import AttemptScheduled
from regatta_shared.ids import attempt_id, new_id
from regatta_shared.messaging.bus import CANCEL_SUBJECT_PREFIX, REPORT_SUBJECT, ensure_streams
from regatta_shared.messaging.jobs import AttemptReport

from tests.support.runs import submission

pytestmark = pytest.mark.timeout(60)


async def test_a_stop_before_the_attempt_s_first_step_is_reported_cancelled(
    nats_url: str, tmp_path: Path
) -> None:
    nc = await nats.connect(nats_url)
    try:
        await ensure_streams(nc.jetstream())
        run_id = new_id("run")
        aid = attempt_id(run_id, 0, "t0", 0)
        scheduled = AttemptScheduled(run_id=run_id, attempt_id=aid, agent_index=0, task="t0", attempt_index=0)
        job = build_job(submission(run_id, tasks=1, agents=1, attempts=1), scheduled)
        reports: asyncio.Queue[AttemptReport] = asyncio.Queue()

        async def collect(msg: Msg) -> None:
            report = AttemptReport.model_validate_json(msg.data)
            if report.run_id == run_id:
                await reports.put(report)

        await nc.subscribe(REPORT_SUBJECT, cb=collect)
        executor = Executor(nc, tmp_path, 1, EnvironmentChoice())
        notice = Msg(nc, subject=f"{CANCEL_SUBJECT_PREFIX}.{run_id}")

        def stop_notice_arrives() -> None:
            # The notice's handler has no await: it runs to its end here, like a subscription callback.
            with contextlib.suppress(StopIteration):
                executor.on_cancel(notice).send(None)

        taking = asyncio.create_task(executor._run_attempt(job))
        # Queued now, this runs right after _run_attempt's first step has created and registered the
        # attempt's task, and before that task's own first step: the window where _attempt cannot catch it.
        asyncio.get_running_loop().call_soon(stop_notice_arrives)
        await asyncio.wait_for(taking, timeout=20)  # raised CancelledError before the fix
        report = await asyncio.wait_for(reports.get(), timeout=10)
        assert (report.kind, report.outcome, report.attempt_id) == ("finished", "cancelled", aid)
        assert report.exception_message == "run stopped before the attempt started"
        assert not executor.running[run_id], "nothing of the attempt is left running"
    finally:
        await nc.close()


async def test_a_job_that_does_not_parse_is_dropped_not_retried_forever(
    nats_url: str, tmp_path: Path
) -> None:
    """Only the scheduler queues jobs; a job that is not an AttemptJob (a version skew) is terminated,
    so no executor takes it again, and the consumer that handed it over is not told to redeliver.
    (On a stream of the test's own: JOBS is a work queue, which takes no second consumer.)"""
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    stream, subject = f"POISON-{new_id('s')}", f"poison.{new_id('j')}"
    try:
        await js.add_stream(name=stream, subjects=[subject])
        await js.publish(subject, b'{"not": "a job"}', stream=stream)
        sub = await js.pull_subscribe(
            subject, durable="executors", stream=stream, config=ConsumerConfig(ack_wait=1.0)
        )
        executor = Executor(nc, tmp_path, 1, EnvironmentChoice())
        (msg,) = await sub.fetch(1, timeout=5)
        await executor.handle(msg)  # returns: no Redeliver, no exception
        await asyncio.sleep(1.5)  # past ack_wait: an unsettled message would be back by now
        with pytest.raises(nats.errors.TimeoutError):
            await sub.fetch(1, timeout=1)
    finally:
        with contextlib.suppress(Exception):
            await js.delete_stream(stream)
        await nc.close()
