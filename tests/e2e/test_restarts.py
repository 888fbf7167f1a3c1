"""Issue 28, items 1 and 2 on the running stack: a restart (SIGTERM of the whole stack, or SIGKILL of one
executor) during long attempts loses no work and cancels nothing; an infrastructure fault is retried by
the platform and the run still ranks."""

from __future__ import annotations

import os
import signal
import socket
import time
from collections import Counter
from pathlib import Path

import docker
import pytest
from regatta_executor.container.engine import engine_answers

from tests.conftest import unavailable
from tests.e2e.test_container_stack import container_stack, containers
from tests.e2e.test_executor import add_folder, run_events
from tests.integration.container_support import images_built_are_removed
from tests.support.gates import Gate
from tests.support.processes import descendants
from tests.support.tasks import run_toml, write_task

pytestmark = pytest.mark.timeout(400)


def _sleeping(stack, seconds: int) -> int:
    """How many sandboxes of the stack's executors are in their `sleep SECONDS` now."""
    executors = [
        p.pid for key, p in stack.processes.items() if key.startswith("executor") and p.poll() is None
    ]
    return sum(f"sleep {seconds}" in process.command for process in descendants(executors).values())


def _attempt_mounts(attempt_ids: list[str]) -> list[str]:
    """Mounts (the local sandboxes' tmpfs) still naming one of the attempts."""
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    return [m for m in mounts if any(a in m for a in attempt_ids)]


def test_a_stack_stopped_during_long_attempts_finishes_them_after_its_restart(
    make_stack, api_for, tmp_path, host_gate: Gate
) -> None:
    """SIGTERM of the stack (Ctrl-C of `regatta up`) while three attempts run: the one that ends within
    the executors' grace is recorded, the two longer ones are abandoned unreported and run again after
    the restart; the run ends `finished` with every result and not one `cancelled`."""
    stack = make_stack(executors=1, REGATTA_EXECUTOR_GRACE_SEC="15", REGATTA_STARTED_REPORT_DELAY="0.5")
    api = api_for(stack)
    tasks = tmp_path / "tasks"
    write_task(tasks, "ending", solve="sleep 7\necho done > /app/out.txt")
    for index in range(2):
        # 35 s the first time; after the restart (the gate open) 1 s.
        write_task(tasks, f"long-{index}", solve=host_gate.sleep_unless_open(35) + "echo done > /app/out.txt")
    add_folder(api, tasks, "restarts")
    run_id = api.submit_toml(run_toml("restarts", concurrency=3))["id"]
    api.wait_for(lambda: _sleeping(stack, 7) == 1 and _sleeping(stack, 35) == 2, timeout=90, every=0.1)

    stopped_at = time.monotonic()
    stack.stop()
    took = time.monotonic() - stopped_at
    assert 14 < took < 15 + 20, f"the executor drained for its grace, then stopped ({took:.1f} s)"
    before = run_events(stack, run_id)
    assert not [d for kind, d in before if kind == "AttemptFinished" and d["outcome"] == "cancelled"]
    ids = [d["attempt_id"] for kind, d in before if kind == "AttemptScheduled"]
    assert len(ids) == 3
    assert _attempt_mounts(ids) == [], "the abandoned attempts' sandboxes are gone"
    executor_log = (stack.logs / "executor-1.log").read_text()
    assert executor_log.count("abandoned as this executor stops") == 2, executor_log[-3000:]

    host_gate.open()
    stack.start()
    detail = api.wait_run(run_id, timeout=240)
    assert detail["benchmark_run"]["status"] == "finished"
    assert detail["progress"] == {"ingested": 3, "expected": 3}
    assert detail["totals"]["passed"] == 3 and detail["totals"]["cancelled"] == 0
    events = run_events(stack, run_id)
    finished = {d["attempt_id"]: d for kind, d in events if kind == "AttemptFinished"}
    assert Counter(d["attempt_id"] for kind, d in events if kind == "AttemptFinished") == Counter(ids)
    assert {d["outcome"] for d in finished.values()} == {"passed"}
    task_of = {d["attempt_id"]: d["task"] for kind, d in events if kind == "AttemptScheduled"}
    again = {
        task_of[d["attempt_id"]] for kind, d in events if kind == "AttemptStarted" and d["delivery"] == 2
    }
    assert again == {"long-0", "long-1"}, (
        "the abandoned ones ran again; the one that ended in the grace did not"
    )


def test_an_executor_killed_during_long_attempts_loses_none_and_cancels_none(
    make_stack, api_for, tmp_path, host_gate: Gate
) -> None:
    """SIGKILL (no drain at all) of one of two executors mid-attempt: its job comes back after
    ack_wait, runs on an executor, and counts once; the survivor's attempt is untouched."""
    stack = make_stack(
        executors=2, REGATTA_JOB_ACK_WAIT="5", REGATTA_EXECUTOR_SLOTS="1", REGATTA_STARTED_REPORT_DELAY="0.5"
    )
    api = api_for(stack)
    tasks = tmp_path / "tasks"
    for index in range(2):
        # 12 s while the gate is shut: the victim's next delivery (after the kill) takes 1 s.
        write_task(tasks, f"long-{index}", solve=host_gate.sleep_unless_open(12) + "echo done > /app/out.txt")
    add_folder(api, tasks, "kill")
    run_id = api.submit_toml(run_toml("kill", concurrency=2))["id"]

    def both_running() -> bool:
        starts = {d["executor_id"] for kind, d in run_events(stack, run_id) if kind == "AttemptStarted"}
        return len(starts) == 2 and _sleeping(stack, 12) == 2

    api.wait_for(both_running, timeout=90, every=0.1)
    killed = f"{socket.gethostname()}-{stack.processes['executor-1'].pid}"
    victim = next(
        d["attempt_id"]
        for kind, d in run_events(stack, run_id)
        if kind == "AttemptStarted" and d["executor_id"] == killed
    )
    stack.kill("executor-1")
    host_gate.open()
    stack.restart("executor-1")

    detail = api.wait_run(run_id, timeout=180)
    assert detail["benchmark_run"]["status"] == "finished"
    assert detail["totals"]["passed"] == 2 and detail["totals"]["cancelled"] == 0
    events = run_events(stack, run_id)
    finished = Counter(d["attempt_id"] for kind, d in events if kind == "AttemptFinished")
    assert len(finished) == 2 and set(finished.values()) == {1}
    outcomes = {
        d["attempt_id"]: (d["outcome"], d["executor_id"]) for kind, d in events if kind == "AttemptFinished"
    }
    assert outcomes[victim][0] == "passed" and outcomes[victim][1] != killed
    deliveries = {
        aid: [d["delivery"] for kind, d in events if kind == "AttemptStarted" and d["attempt_id"] == aid]
        for aid in finished
    }
    survivor = next(aid for aid in finished if aid != victim)
    # The job came back after the kill; a late heartbeat on a loaded host may bring it once more
    # (at-least-once delivery), and it still counts once (above).
    assert deliveries[victim][:2] == [1, 2] and deliveries[victim] == sorted(set(deliveries[victim]))
    assert deliveries[survivor] == [1], "heartbeats kept the live 12 s attempt from redelivery (ack_wait 5 s)"


def test_a_container_removed_under_an_attempt_is_retried_and_the_agent_ranks(
    make_stack, api_for, tmp_path
) -> None:
    """An infrastructure fault injected from outside: the attempt's container is removed (`docker rm -f`)
    while its agent sleeps. The platform retries it (an infrastructure retry, recorded as such) under the
    run's standard conditions, the retry passes, and the agent appears on the leaderboard."""
    if not engine_answers():
        unavailable("no Docker engine answers (scripts/services.sh starts one)")
    engine = docker.from_env()
    with images_built_are_removed(tmp_path):
        stack, owners = container_stack(make_stack, tmp_path, REGATTA_RETRY_BASE_DELAY="0.5")
        api = api_for(stack)
        tasks = tmp_path / "tasks"
        write_task(tasks, "sleeper", solve="sleep 20\necho done > /app/out.txt")
        write_task(tasks, "quick")
        benchmark = add_folder(api, tasks, "vanishing")
        run_id = api.submit_toml(run_toml("vanishing", concurrency=2))["id"]

        def sleeping_container() -> str | None:
            for found in containers(engine, owners):
                try:
                    processes = engine.api.top(found["Id"]).get("Processes") or []
                except docker.errors.APIError:
                    continue  # not running (yet, or any more)
                if any("sleep 20" in " ".join(p) for p in processes):
                    return found["Id"]
            return None

        victim = api.wait_for(sleeping_container, timeout=180, every=0.2)
        engine.api.remove_container(victim, force=True)

        detail = api.wait_run(run_id, timeout=240)
        assert detail["benchmark_run"]["status"] == "finished"
        assert detail["totals"]["passed"] == 2 and detail["totals"]["errored"] == 0
        events = run_events(stack, run_id)
        retried = [d for kind, d in events if kind == "AttemptRetried"]
        assert len(retried) == 1 and retried[0]["infrastructure"] is True, retried
        finished = {d["task"]: d for kind, d in events if kind == "AttemptFinished"}
        assert finished["sleeper"]["try_number"] == 2 and finished["sleeper"]["outcome"] == "passed"
        logs = [e["message"] for e in api.all_logs(run_id) if e["step"] == "retry"]
        assert len(logs) == 1 and "an infrastructure retry" in logs[0], logs

        qualification = detail["leaderboard_qualification"]
        assert qualification["qualifies"] is True, qualification
        assert qualification["conditions"] == qualification["standard_conditions"]
        assert qualification["conditions"]["max_retries"] == 0
        rows = api.wait_for(
            lambda: api.get(f"/benchmarks/{benchmark['id']}/leaderboard")["leaderboard"], timeout=60
        )
        assert [row["run_id"] for row in rows] == [run_id]
        assert rows[0]["conditions"] == qualification["standard_conditions"]
        assert containers(engine, owners) == [], "no container outlives the run"


def test_a_second_sigterm_ends_the_grace_at_once_and_still_cancels_nothing(
    make_stack, api_for, tmp_path, host_gate: Gate
) -> None:
    """A second Ctrl-C: the executor stops its attempt now instead of after its (long) grace, and the
    attempt still runs again and counts once."""
    stack = make_stack(executors=1, REGATTA_EXECUTOR_GRACE_SEC="300", REGATTA_STARTED_REPORT_DELAY="0.5")
    api = api_for(stack)
    write_task(tmp_path / "tasks", "long", solve=host_gate.sleep_unless_open(15) + "echo done > /app/out.txt")
    add_folder(api, tmp_path / "tasks", "hurry")
    run_id = api.submit_toml(run_toml("hurry"))["id"]

    def reported_started() -> bool:
        return any(kind == "AttemptStarted" for kind, _ in run_events(stack, run_id))

    # Running, and recorded so (the report comes REGATTA_STARTED_REPORT_DELAY after the start).
    api.wait_for(lambda: _sleeping(stack, 15) == 1 and reported_started(), timeout=90, every=0.1)
    executor = stack.processes["executor-1"]
    os.killpg(executor.pid, signal.SIGTERM)
    api.wait_for(lambda: "waiting up to 300 s" in (stack.logs / "executor-1.log").read_text(), timeout=10)
    began = time.monotonic()
    os.killpg(executor.pid, signal.SIGTERM)
    executor.wait(timeout=30)
    assert time.monotonic() - began < 20, "the second signal cut the 300 s grace short"

    host_gate.open()
    stack.restart("executor-1")
    detail = api.wait_run(run_id, timeout=120)
    assert detail["benchmark_run"]["status"] == "finished"
    assert detail["totals"]["passed"] == 1 and detail["totals"]["cancelled"] == 0
    events = run_events(stack, run_id)
    assert [d["outcome"] for kind, d in events if kind == "AttemptFinished"] == ["passed"]
    assert [d["delivery"] for kind, d in events if kind == "AttemptStarted"] == [1, 2]
