"""A forged executor report cannot change a run (issue 18, finding 2), on the running stack.

The attack as a task or a stolen executor credential would try it: publish an AttemptFinished-type
report, passed with reward 1, for a victim's attempt that is still running. Without credentials the
bus refuses the client; with them (an executor's, or even the admin's) the scheduler drops the report
for want of the attempt's MAC, and the attempt ends with its real outcome.
"""

from __future__ import annotations

import asyncio
import json
import secrets

import nats
import nats.errors
import pytest
from regatta_shared.messaging.bus import EXECUTOR_INBOX_PREFIX, REPORT_SUBJECT, REPORTS_STREAM
from regatta_shared.security.attempt_auth import MAC_HEADER

from tests.e2e.test_executor import add_folder, run_events
from tests.support.gates import NEVER_OPENED, gate
from tests.support.tasks import run_toml, write_task

pytestmark = pytest.mark.timeout(300)


def forged_report(run_id: str, attempt_id: str) -> bytes:
    return json.dumps(
        {
            "kind": "finished",
            "run_id": run_id,
            "attempt_id": attempt_id,
            "try_number": 1,
            "executor_id": "forger",
            "outcome": "passed",
            "rewards": {"reward": 1.0},
            "primary_reward": 1.0,
        }
    ).encode()


async def publish_forgeries(stack, run_id: str, attempt_id: str) -> int:
    """Every forgery this test tries; returns how many reached REPORTS (the scheduler must drop them)."""
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await nats.connect(stack.nats.anonymous_url(), allow_reconnect=False, connect_timeout=5)
    sent = 0
    for user, inbox in (("executor", EXECUTOR_INBOX_PREFIX), ("admin", "_INBOX")):
        nc = await nats.connect(stack.nats.url(user), inbox_prefix=inbox, allow_reconnect=False)
        js = nc.jetstream()
        try:
            payload = forged_report(run_id, attempt_id)
            for headers in (None, {MAC_HEADER: secrets.token_hex(32)}):
                await js.publish(REPORT_SUBJECT, payload, stream=REPORTS_STREAM, headers=headers, timeout=10)
                sent += 1
            # Not a report at all: dropped too, without holding up the reports behind it.
            await js.publish(REPORT_SUBJECT, b"\xff not json", stream=REPORTS_STREAM, timeout=10)
            sent += 1
        finally:
            await nc.close()
    return sent


def test_a_forged_report_changes_no_run(make_stack, api_for, tmp_path) -> None:
    stack = make_stack(executors=1)
    api = api_for(stack)
    with gate() as held:
        # Its oracle waits at the gate and never writes "done": the real outcome is failed, reward 0.
        write_task(tmp_path / "tasks", "victim", solve=held.wait(timeout_sec=90))
        add_folder(api, tmp_path / "tasks", "victim")
        run_id = api.submit_toml(run_toml("victim", concurrency=1))["id"]

        def running_attempt() -> str | None:
            attempts = api.get(f"/runs/{run_id}/attempts")["attempts"]
            return attempts[0]["attempt_id"] if attempts and attempts[0]["status"] == "running" else None

        attempt_id = api.wait_for(running_attempt, timeout=90)
        sent = asyncio.run(publish_forgeries(stack, run_id, attempt_id))
        log = stack.logs / "run-scheduler.log"
        api.wait_for(lambda: log.read_text().count("dropped a") >= sent or None, timeout=60)
        assert f"dropped a finished report for attempt '{attempt_id}'" in log.read_text()

        assert running_attempt() == attempt_id, "the forged reports left the attempt running"
        assert "AttemptFinished" not in [kind for kind, _ in run_events(stack, run_id)]
        held.open()
        detail = api.wait_run(run_id, timeout=120)

    assert detail["benchmark_run"]["status"] == "finished"
    [finished] = [data for kind, data in run_events(stack, run_id) if kind == "AttemptFinished"]
    assert finished["outcome"] == "failed" and finished["primary_reward"] == 0.0
    assert finished["executor_id"] != "forger"
    assert detail["totals"]["passed"] == 0
    assert NEVER_OPENED not in api.artifact_texts(run_id, limit=100_000)
