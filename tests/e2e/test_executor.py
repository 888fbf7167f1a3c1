"""Issue 3 on the running stack: retries of infrastructure faults, stop, and two executors sharing work."""

from __future__ import annotations

import json
import socket
from collections import Counter
from pathlib import Path

from sqlalchemy import create_engine, text

from tests.e2e.web_ui_support import ACK_WAIT
from tests.support.processes import descendants
from tests.support.tasks import run_toml, write_task, write_tasks


def add_folder(api, path, name: str) -> dict:
    response = api.http.post(
        "/api/v1/benchmarks", json={"source_type": "folder", "path": str(path), "name": name}
    )
    assert response.status_code == 201, response.text
    benchmark = api.benchmark_ready(name)
    assert benchmark["sync_status"] == "ready", benchmark
    return benchmark


def run_events(stack, run_id: str) -> list[tuple[str, dict]]:
    engine = create_engine(stack.database_url)
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT type, data FROM events WHERE stream_id = :s ORDER BY position"),
            {"s": f"run-{run_id}"},
        ).all()
    engine.dispose()
    return [(kind, data if isinstance(data, dict) else json.loads(data)) for kind, data in rows]


def test_infrastructure_faults_are_retried_then_pass_or_end_errored(make_stack, api_for, tmp_path) -> None:
    """The platform's one infrastructure retry comes first, then the run's own `max_retries`."""
    counters = tmp_path / "counters"
    counters.mkdir()
    stack = make_stack(
        executors=1,
        REGATTA_EXECUTOR_ENVIRONMENT="tests.support.flaky_environment:FlakyLocalEnvironment",
        REGATTA_EXECUTOR_ENVIRONMENT_KWARGS=json.dumps({"failures": 3, "counter_dir": str(counters)}),
        REGATTA_RETRY_BASE_DELAY="0.2",
        REGATTA_INFRA_RETRIES="1",
    )
    api = api_for(stack)
    add_folder(api, write_tasks(tmp_path / "tasks", 2, prefix="flaky"), "flaky")
    recovered = api.submit_toml(run_toml("flaky", retries=2, task_names=["flaky-0"]))
    exhausted = api.submit_toml(run_toml("flaky", retries=1, task_names=["flaky-1"]))

    detail = api.wait_run(recovered["id"])
    assert detail["benchmark_run"]["status"] == "finished"
    assert detail["totals"]["passed"] == 1 and detail["totals"]["errored"] == 0
    events = run_events(stack, recovered["id"])
    retries = [d for kind, d in events if kind == "AttemptRetried"]
    assert [(r["try_number"], r["infrastructure"]) for r in retries] == [(2, True), (3, False), (4, False)]
    assert all(r["exception_type"] == "SandboxBuildFailedError" for r in retries)
    finished = [d for kind, d in events if kind == "AttemptFinished"]
    assert len(finished) == 1 and finished[0]["outcome"] == "passed" and finished[0]["try_number"] == 4

    detail = api.wait_run(exhausted["id"])
    # Its only attempt errored: nothing was measured, so the run fails saying why (issue 19).
    assert detail["benchmark_run"]["status"] == "failed"
    assert detail["benchmark_run"]["status_reason"] == (
        "every attempt errored (1 of 1); error: SandboxBuildFailedError: injected infrastructure fault #3"
    )
    finished = [d for kind, d in run_events(stack, exhausted["id"]) if kind == "AttemptFinished"]
    assert len(finished) == 1
    assert finished[0]["outcome"] == "errored" and finished[0]["exception_type"] == "SandboxBuildFailedError"
    metrics = detail["agent_metrics"][0]
    assert metrics["errored"] == 1 and metrics["failed"] == 0, "an infrastructure error is never scored"
    assert metrics["pass_at_1"] is None


def _sandbox_processes(stack) -> list[str]:
    """The sandboxes (bwrap and what runs in it) of this test's own executors."""
    executors = [process.pid for key, process in stack.processes.items() if key.startswith("executor")]
    return [
        process.command
        for process in descendants(executors).values()
        if process.name == "bwrap" or "sleep 30" in process.command
    ]


def test_stop_cancels_in_flight_attempts_and_keeps_finished_results(shared_stack, api_for, tmp_path) -> None:
    stack = shared_stack(executors=1, **ACK_WAIT)
    api = api_for(stack)
    tasks = tmp_path / "tasks"
    write_tasks(tasks, 2, prefix="fast")
    write_tasks(tasks, 4, prefix="slow", sleep=30)
    add_folder(api, tasks, "mixed")
    created = api.submit_toml(run_toml("mixed", concurrency=4))
    run_id = created["id"]
    api.wait_for(lambda: api.get(f"/runs/{run_id}")["totals"]["passed"] >= 2, timeout=60)
    api.wait_for(
        lambda: sum(a["status"] == "running" for a in api.get(f"/runs/{run_id}/attempts")["attempts"]) >= 3,
        timeout=60,
    )
    assert api.http.post(f"/api/v1/runs/{run_id}/stop").status_code == 202
    # That the running attempts were cancelled, not waited for, shows in their outcomes below.
    detail = api.wait_run(run_id, timeout=60)
    assert detail["benchmark_run"]["status"] == "stopped"
    attempts = api.get(f"/runs/{run_id}/attempts")["attempts"]
    outcomes = Counter(a["outcome"] for a in attempts)
    assert outcomes["passed"] == 2, "finished results stay on the run"
    assert outcomes["cancelled"] == 4 and outcomes[None] == 0
    assert not _sandbox_processes(stack), "every sandbox was cleaned before the run became stopped"
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    leftover = [m for m in mounts for a in attempts if a["attempt_id"] in m]
    assert leftover == [], "the sandboxes' tmpfs mounts (storage cap) were removed"
    steps = [e["step"] for e in api.all_logs(run_id)]
    last_stop = len(steps) - 1 - steps[::-1].index("stop")
    assert steps.index("stop") < last_stop, "stop requested, then run stopped"
    # Scoring may record the stopped run's final scores after it stopped; nothing else follows.
    assert set(steps[last_stop + 1 :]) <= {"score"}, steps
    conflict = api.http.post(f"/api/v1/runs/{run_id}/stop")
    assert conflict.status_code == 409


def test_a_stop_waits_for_the_sandboxes_of_attempts_not_yet_reported_started(
    make_stack, api_for, tmp_path
) -> None:
    """Within the started-report delay the scheduler knows an attempt only by its executor's claim
    (no event): a stop must still wait for the executor to cancel it and clean its sandbox."""
    stack = make_stack(executors=1, REGATTA_STARTED_REPORT_DELAY="120")
    api = api_for(stack)
    add_folder(api, write_tasks(tmp_path / "tasks", 3, prefix="slow", sleep=30), "slow")
    run_id = api.submit_toml(run_toml("slow", concurrency=3))["id"]
    api.wait_for(lambda: sum("sleep 30" in p for p in _sandbox_processes(stack)) >= 3, timeout=60)
    assert api.http.post(f"/api/v1/runs/{run_id}/stop").status_code == 202
    detail = api.wait_run(run_id, timeout=60)
    assert detail["benchmark_run"]["status"] == "stopped"
    assert not _sandbox_processes(stack), "every sandbox was cleaned before the run became stopped"
    events = run_events(stack, run_id)
    assert "AttemptStarted" not in [kind for kind, _ in events]
    finished = [d for kind, d in events if kind == "AttemptFinished"]
    assert [(d["outcome"], d["exception_message"]) for d in finished] == [
        ("cancelled", "run stopped during the attempt")
    ] * 3, "each was cancelled by its executor, not by the scheduler without waiting"


def test_two_executors_share_work_and_a_killed_one_loses_nothing(make_stack, api_for, tmp_path) -> None:
    stack = make_stack(executors=2, REGATTA_JOB_ACK_WAIT="3", REGATTA_EXECUTOR_SLOTS="2")
    api = api_for(stack)
    add_folder(api, write_tasks(tmp_path / "tasks", 8, prefix="work", sleep=1), "work")
    created = api.submit_toml(run_toml("work", attempts=2, concurrency=4))
    run_id = created["id"]

    def executors_busy() -> bool:
        started = [d for kind, d in run_events(stack, run_id) if kind == "AttemptStarted"]
        return len({d["executor_id"] for d in started}) == 2

    api.wait_for(executors_busy, timeout=60)
    # The run page is a projection: it may trail the store the line above reads by a few milliseconds.
    api.wait_for(lambda: api.get(f"/runs/{run_id}")["benchmark_run"]["status"] == "running", timeout=10)
    # An executor's id is "<host>-<pid>" and the stack starts it as its own process.
    killed, survivor = (
        f"{socket.gethostname()}-{stack.processes[key].pid}" for key in ("executor-2", "executor-1")
    )
    stack.kill("executor-2")
    detail = api.wait_run(run_id, timeout=240)
    assert detail["benchmark_run"]["status"] == "finished"
    events = run_events(stack, run_id)
    finished = Counter(d["attempt_id"] for kind, d in events if kind == "AttemptFinished")
    assert len(finished) == 16 and set(finished.values()) == {1}
    assert detail["totals"]["passed"] == 16
    starters = {d["executor_id"] for kind, d in events if kind == "AttemptStarted"}
    assert starters == {killed, survivor}, "both executors did work"
    finishers = Counter(d["executor_id"] for kind, d in events if kind == "AttemptFinished")
    assert set(finishers) <= {killed, survivor} and finishers[survivor] > 0, "the survivor carried on"


def test_only_attempts_longer_than_the_delay_are_reported_started(make_stack, api_for, tmp_path) -> None:
    """A short attempt goes straight to its outcome (one report and one event fewer); a longer one is
    seen running, its start recorded before its outcome."""
    # A trivial attempt takes well under a second once warm, but the first one of a cold executor
    # on a slow machine may take more: the delay leaves it room.
    stack = make_stack(executors=1, REGATTA_STARTED_REPORT_DELAY="5.0")
    api = api_for(stack)
    write_task(tmp_path / "mixed", "quick")
    write_task(tmp_path / "mixed", "long", solve="sleep 8\necho done > /app/out.txt")
    add_folder(api, tmp_path / "mixed", "mixed")
    run_id = api.submit_toml(run_toml("mixed", concurrency=2))["id"]

    def running() -> list[dict] | None:
        attempts = api.get(f"/runs/{run_id}/attempts")["attempts"]
        return [a for a in attempts if a["status"] == "running"] or None

    assert [a["task"] for a in api.wait_for(running, timeout=60)] == ["long"]
    assert api.wait_run(run_id)["benchmark_run"]["status"] == "finished"
    events = run_events(stack, run_id)
    finished = {d["attempt_id"]: d for kind, d in events if kind == "AttemptFinished"}
    started = [d["attempt_id"] for kind, d in events if kind == "AttemptStarted"]
    assert sorted(d["task"] for d in finished.values()) == ["long", "quick"]
    assert [finished[a]["task"] for a in started] == ["long"]
    kinds = [(kind, d.get("attempt_id")) for kind, d in events]
    assert kinds.index(("AttemptStarted", started[0])) < kinds.index(("AttemptFinished", started[0]))
    assert all(d["outcome"] == "passed" and d["started_at"] for d in finished.values())
