"""Issue 30, Watch: a running attempt's page shows the agent's output and its trajectory's steps as they
are written, with its phase and elapsed time; a secret the agent prints is never shown live nor sent on the
bus; a chatty agent cannot send more than its caps while another attempt of the run finishes as usual."""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import nats
from nats.js.api import DeliverPolicy
from playwright.sync_api import Page, expect
from regatta_shared.messaging.live import LIVE_SUBJECT_PREFIX

from tests.e2e.web_ui_layout import assert_readable
from tests.e2e.web_ui_support import (
    ACK_WAIT,
    LONG,
    add_folder_benchmark,
    assert_same_page,
    mark_page,
    sign_in,
)
from tests.support.tasks import write_task

SECRET = "wsk-" + secrets.token_hex(12)
# The agent: a line and a trajectory of one step at once, the secret split across two writes more than a
# tick apart (so the executor reads it in two pieces), then, well after the test has opened the page, a line
# and a second trajectory step (with the secret, JSON-escaped as an agent's JSON would hold it), with their
# time.
WATCHED = """echo "first line from the agent"
HEAD='"schema_version": "ATIF-v1.6", "session_id": "w"'
STEP1='{"step_id": 1, "source": "user", "message": "Write done to /app/out.txt"}'
printf '{%s, "steps": [%s]}' "$HEAD" "$STEP1" > /logs/agent/trajectory.json
printf 'the key is %s' "${WATCH_TOKEN:0:12}"
sleep 1.5
printf '%s and more\\n' "${WATCH_TOKEN:12}"
sleep 12
echo "second line written at $(date +%s.%N)"
KEY="${WATCH_TOKEN:0:3}\\u002d${WATCH_TOKEN:4}"
STEP2=$(printf '{"step_id": 2, "source": "agent", "message": "step written at %s with key %s"}' \\
  "$(date +%s.%N)" "$KEY")
printf '{%s, "steps": [%s, %s]}' "$HEAD" "$STEP1" "$STEP2" > /logs/agent/trajectory.json
sleep 10
echo done > /app/out.txt"""
# Megabytes a second for a few seconds: far past the caps below.
CHATTY = """for i in $(seq 6); do head -c 3000000 /dev/zero | tr '\\0' a; echo; sleep 1; done
echo done > /app/out.txt"""
RATE, CAP = 65536, 256 * 1024


def submission(benchmark: str, **execution: Any) -> dict[str, Any]:
    return {
        "name": f"watch-{benchmark}",
        "experiment_config": {"benchmark": benchmark},
        "agents": [{"harness": "oracle", "model": {"type": "hosted", "base_model": "none"}}],
        "execution_config": {"attempts_per_task": 1, **execution},
        "secrets": {"required": ["WATCH_TOKEN"], "provided": {"WATCH_TOKEN": SECRET}},
    }


def live_messages(nats_url: str, run_id: str) -> dict[str, list[bytes]]:
    """Every message the LIVE stream holds for the run's attempts, by subject: what went on the bus."""

    async def read() -> dict[str, list[bytes]]:
        nc = await nats.connect(nats_url)
        try:
            js = nc.jetstream()
            sub = await js.subscribe(
                f"{LIVE_SUBJECT_PREFIX}.{run_id}.*", ordered_consumer=True, deliver_policy=DeliverPolicy.ALL
            )
            found: dict[str, list[bytes]] = {}
            while True:
                try:
                    msg = await sub.next_msg(timeout=2.0)
                except nats.errors.TimeoutError:
                    return found
                found.setdefault(msg.subject, []).append(msg.data)
        finally:
            await nc.close()

    # In a thread of its own: the browser's driver holds this thread's event loop.
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, read()).result()


def running_attempt(api: Any, run_id: str) -> dict[str, Any]:
    def running() -> dict[str, Any] | None:
        attempts = api.get(f"/runs/{run_id}/attempts")["attempts"]
        return next((a for a in attempts if a["status"] == "running"), None)

    return api.wait_for(running, timeout=120)


def test_a_running_attempts_page_shows_its_output_live_without_its_secrets(
    shared_stack, api_for, page: Page, tmp_path: Path
) -> None:
    stack = shared_stack(executors=1, **ACK_WAIT)
    api = api_for(stack)
    write_task(tmp_path / "watch", "watch-000", solve=WATCHED)
    add_folder_benchmark(api, tmp_path / "watch", "watch")
    api.benchmark_ready("watch")
    sign_in(page, stack)
    created = api.http.post("/api/v1/runs", json=submission("watch"))
    assert created.status_code == 201, created.text
    run_id = created.json()["id"]
    attempt = running_attempt(api, run_id)

    # From the run's Task Results to the attempt's own page.
    page.goto(f"{stack.url}/benchmarks/runs/{run_id}?tab=results")
    results = page.get_by_test_id("results-table")
    results.get_by_role("button", name=re.compile(r"Details of watch-000")).click()
    results.get_by_test_id("watch-attempt").click()
    expect(page).to_have_url(re.compile(rf"/attempts/{attempt['attempt_id']}$"))
    output = page.get_by_test_id("live-output")
    steps = page.get_by_test_id("live-trajectory")
    expect(output).to_contain_text("first line from the agent", timeout=LONG)
    expect(steps).to_contain_text("Write done to /app/out.txt", timeout=LONG)
    opened = time.time()
    mark_page(page)
    expect(page.get_by_test_id("attempt-phase")).to_have_text("agent running")
    expect(page.get_by_test_id("attempt-elapsed")).to_contain_text("so far")
    # The secret reached the executor in two reads; neither half is shown.
    expect(output).to_contain_text("the key is [REDACTED] and more")

    # A line the agent wrote after the page had opened, shown before the attempt ended.
    expect(output).to_contain_text("second line written at", timeout=LONG)
    written = float(re.search(r"second line written at ([0-9.]+)", output.inner_text())[1])
    assert written > opened, (written, opened)
    assert api.get(f"/runs/{run_id}/attempts")["attempts"][0]["outcome"] is None, "shown before the end"
    # The trajectory's second step, written after the page opened, under its own heading, its secret
    # (escaped in the agent's JSON, so no byte pattern of it matched) redacted.
    expect(steps).to_contain_text("with key [REDACTED]", timeout=LONG)
    step_written = float(re.search(r"step written at ([0-9.]+)", steps.inner_text())[1])
    assert step_written > opened, (step_written, opened)
    assert api.get(f"/runs/{run_id}/attempts")["attempts"][0]["outcome"] is None, "shown before the end"
    expect(steps.locator(".msg-agent")).to_have_count(1)
    expect(steps.locator(".msg-user")).to_have_count(1)
    expect(page.get_by_test_id("trajectory-note")).to_be_hidden()

    expect(page.get_by_test_id("attempt-state")).to_have_text("passed", timeout=LONG)
    expect(page.get_by_test_id("attempt-phase")).to_have_text("ended")
    messages = [json.loads(m) for ms in live_messages(stack.nats_url, run_id).values() for m in ms]
    assert not [m for m in messages if m.get("truncated")], messages  # far below the caps
    expect(page.get_by_test_id("live-truncated")).to_have_count(0)
    assert_readable(page, "attempt-live", ["Watch", "passed", "ended", "first line from the agent"])
    assert_same_page(page)
    shown = output.inner_text() + steps.inner_text()
    assert SECRET not in shown and SECRET[:12] not in shown and SECRET[12:] not in shown
    assert SECRET[4:] not in shown
    sent = b"".join(m for ms in live_messages(stack.nats_url, run_id).values() for m in ms)
    assert b"first line from the agent" in sent
    assert SECRET[:12].encode() not in sent and SECRET[12:].encode() not in sent
    assert SECRET[4:].encode() not in sent and b"trajectory.json" in sent


def test_a_chatty_agent_sends_no_more_than_its_caps_and_others_run_as_usual(
    make_stack, api_for, tmp_path: Path
) -> None:
    stack = make_stack(
        executors=1, REGATTA_LIVE_RATE_BYTES=str(RATE), REGATTA_LIVE_MAX_BYTES=str(CAP), **ACK_WAIT
    )
    api = api_for(stack)
    write_task(tmp_path / "chat", "chatty-000", solve=CHATTY)
    write_task(
        tmp_path / "chat", "normal-000", solve='sleep 2\necho "a normal line"\necho done > /app/out.txt'
    )
    add_folder_benchmark(api, tmp_path / "chat", "chat")
    api.benchmark_ready("chat")
    created = api.http.post("/api/v1/runs", json=submission("chat", max_concurrent_attempts=2))
    assert created.status_code == 201, created.text
    run_id = created.json()["id"]
    assert api.wait_run(run_id, timeout=240)["benchmark_run"]["status"] == "finished"
    attempts = {a["task"]: a for a in api.get(f"/runs/{run_id}/attempts")["attempts"]}
    assert {a["outcome"] for a in attempts.values()} == {"passed"}, attempts
    # The two ran side by side: the normal one started before the chatty one ended.
    assert attempts["normal-000"]["started_at"] < attempts["chatty-000"]["finished_at"]

    by_subject = live_messages(stack.nats_url, run_id)
    chunks = {subject: [json.loads(m) for m in messages] for subject, messages in by_subject.items()}
    chatty_subject = f"{LIVE_SUBJECT_PREFIX}.{run_id}.{attempts['chatty-000']['attempt_id']}"
    chatty = chunks[chatty_subject]
    normal = chunks[f"{LIVE_SUBJECT_PREFIX}.{run_id}.{attempts['normal-000']['attempt_id']}"]
    text_bytes = sum(len(c.get("text", "").encode()) for c in chatty)
    assert CAP * 0.9 <= text_bytes <= CAP, text_bytes  # the cap was reached, never passed
    assert sum(
        len(m) for m in by_subject[f"{LIVE_SUBJECT_PREFIX}.{run_id}.{attempts['chatty-000']['attempt_id']}"]
    ) < (CAP + 200 * len(chatty))
    assert [c for c in chatty if c.get("truncated")], "the cap is said once reached"
    # Never faster than the rate (a second's burst allowed), by the executor's own clock.
    times = [c["at"] for c in chatty if c.get("text")]
    span = (datetime.fromisoformat(times[-1]) - datetime.fromisoformat(times[0])).total_seconds()
    assert text_bytes <= RATE * (span + 1.5), (text_bytes, span)
    # The other attempt's output went out whole, with its phases.
    assert "a normal line" in "".join(c.get("text", "") for c in normal)
    assert [c["phase"] for c in normal if c.get("phase")] == ["setup", "agent", "verifier", "done"]
