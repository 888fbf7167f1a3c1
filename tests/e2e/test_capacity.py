"""Scheduling across executor hosts by capacity (issue 39) on the running stack, its executors real
processes declared smaller than this 2-core machine: a 1-CPU host and 2-CPU hosts.

A task asking 2 CPUs runs only on a 2-CPU host: it waits, handed back by the small one, while none is
up, runs there once one starts, is handed back by a big host that stops under it and ends exactly once,
and ends errored saying what is missing when no live host has it for REGATTA_CAPACITY_WAIT_SEC."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from pathlib import Path

import nats
import pytest
from nats.js.errors import KeyNotFoundError
from regatta_executor.hosts import host_key
from regatta_shared.bus import EXECUTOR_HOSTS_BUCKET, JOB_HANDBACKS_BUCKET

from tests.e2e.test_executor import add_folder, run_events
from tests.support.tasks import run_toml, write_task

pytestmark = pytest.mark.timeout(600)

SMALL = {"REGATTA_EXECUTOR_CPUS": "1", "REGATTA_CAPACITY_WAIT_SEC": "600"}


def sized_task(root: Path, name: str, cpus: int, sleep: float = 0) -> None:
    solve = (f"sleep {sleep}\n" if sleep else "") + "echo done > /app/out.txt"
    task = write_task(root, name, solve=solve)
    with (task / "task.toml").open("a") as toml:  # task.toml ends in its [environment] table
        toml.write(f"cpus = {cpus}\n")


def executor_id(process) -> str:
    return f"{socket.gethostname()}-{process.pid}"


def hand_backs(stack, attempt: str) -> int:
    """How often the attempt's job was handed back for want of capacity (read as the platform's admin)."""

    async def read() -> int:
        nc = await nats.connect(stack.nats.url("admin"))
        try:
            entry = await (await nc.jetstream().key_value(JOB_HANDBACKS_BUCKET)).get(f"{attempt}_0")
            return int(entry.value or b"0")
        except KeyNotFoundError:
            return 0
        finally:
            await nc.close()

    return asyncio.run(read())


def stop_executor(stack, key: str) -> None:
    """SIGTERM, as `docker compose stop` or a node drain sends it; waits for the process to end."""
    process = stack.processes[key]
    os.killpg(process.pid, signal.SIGTERM)
    process.wait(timeout=60)


def announced(stack, process) -> bool:
    """Whether the executor's key is in the hosts bucket (read as the platform's admin)."""

    async def read() -> bool:
        nc = await nats.connect(stack.nats.url("admin"))
        try:
            await (await nc.jetstream().key_value(EXECUTOR_HOSTS_BUCKET)).get(host_key(executor_id(process)))
            return True
        except KeyNotFoundError:
            return False
        finally:
            await nc.close()

    return asyncio.run(read())


def finished_by_attempt(stack, run_id: str) -> dict[str, list[dict]]:
    finished: dict[str, list[dict]] = {}
    for kind, data in run_events(stack, run_id):
        if kind == "AttemptFinished":
            finished.setdefault(data["attempt_id"], []).append(data)
    return finished


def test_a_task_runs_only_on_a_host_that_can_hold_it_waits_for_one_and_fails_when_none_has_it(
    make_stack, api_for, tmp_path
) -> None:
    stack = make_stack(executors=0, REGATTA_EXECUTOR_SLOTS="2", REGATTA_STARTED_REPORT_DELAY="0")
    api = api_for(stack)
    tasks = tmp_path / "tasks"
    sized_task(tasks, "big-fast", cpus=2)
    sized_task(tasks, "big-slow", cpus=2, sleep=15)
    sized_task(tasks, "small-0", cpus=1)
    sized_task(tasks, "small-1", cpus=1)
    add_folder(api, tasks, "sizes")
    small = stack.start_service("executor", "executor-small", SMALL)

    # Only a 1-CPU host: the 1-CPU tasks run on it; the 2-CPU task waits, handed back again and again.
    run = api.submit_toml(run_toml("sizes", task_names=["big-fast", "small-0", "small-1"]))
    attempts = lambda: {a["task"]: a for a in api.get(f"/runs/{run['id']}/attempts")["attempts"]}  # noqa: E731
    api.wait_for(lambda: sum(a["outcome"] == "passed" for a in attempts().values()) == 2, timeout=120)
    big_attempt = attempts()["big-fast"]["attempt_id"]
    api.wait_for(lambda: hand_backs(stack, big_attempt) >= 3, timeout=60)
    assert attempts()["big-fast"]["status"] == "scheduled"
    assert api.get(f"/runs/{run['id']}")["benchmark_run"]["status"] == "running"

    # A 2-CPU host starts late: the waiting attempt runs there.
    big = stack.start_service("executor", "executor-big")
    detail = api.wait_run(run["id"])
    assert detail["benchmark_run"]["status"] == "finished" and detail["totals"]["passed"] == 3
    finished = finished_by_attempt(stack, run["id"])
    assert all(len(ends) == 1 for ends in finished.values()) and len(finished) == 3
    ran_on = {a["task"]: finished[a["attempt_id"]][0]["executor_id"] for a in attempts().values()}
    assert ran_on["big-fast"] == executor_id(big), ran_on
    assert {ran_on["small-0"], ran_on["small-1"]} <= {executor_id(small), executor_id(big)}
    assert announced(stack, small) and announced(stack, big)

    # SIGTERM to the big host mid-attempt: past its grace (1 s) the attempt is handed back unreported,
    # the host withdraws, the small one keeps handing the job back, and a new big host runs it once.
    run = api.submit_toml(run_toml("sizes", task_names=["big-slow"]))
    api.wait_for(
        lambda: any(
            kind == "AttemptStarted" and d["executor_id"] == executor_id(big)
            for kind, d in run_events(stack, run["id"])
        ),
        timeout=60,
    )
    slow_attempt = api.get(f"/runs/{run['id']}/attempts")["attempts"][0]["attempt_id"]
    before = hand_backs(stack, slow_attempt)
    stop_executor(stack, "executor-big")
    assert "abandoned as this executor stops" in (stack.logs / "executor-big.log").read_text()
    assert not announced(stack, big), "a host that left cleanly withdrew its announcement"
    api.wait_for(lambda: hand_backs(stack, slow_attempt) >= before + 2, timeout=60)
    big_again = stack.start_service("executor", "executor-big-2")
    detail = api.wait_run(run["id"])
    assert detail["benchmark_run"]["status"] == "finished" and detail["totals"]["passed"] == 1
    assert detail["totals"]["errored"] == 0
    [ends] = finished_by_attempt(stack, run["id"]).values()
    assert (
        len(ends) == 1 and ends[0]["executor_id"] == executor_id(big_again) and ends[0]["outcome"] == "passed"
    )
    starts = [d for kind, d in run_events(stack, run["id"]) if kind == "AttemptStarted"]
    assert [s["executor_id"] for s in starts] == [executor_id(big), executor_id(big_again)]
    assert starts[1]["delivery"] > 2, "handed back in between, and those deliveries were no failures"

    # No live host has 2 CPUs: past REGATTA_CAPACITY_WAIT_SEC the attempt ends errored saying so.
    stop_executor(stack, "executor-big-2")
    stop_executor(stack, "executor-small")
    only_small = stack.start_service(
        "executor", "executor-small-2", {**SMALL, "REGATTA_CAPACITY_WAIT_SEC": "5"}
    )
    run = api.submit_toml(run_toml("sizes", task_names=["big-fast"]))
    detail = api.wait_run(run["id"], timeout=120)
    [attempt] = api.get(f"/runs/{run['id']}/attempts")["attempts"]
    assert attempt["outcome"] == "errored"
    message = attempt["result"]["exception_message"]
    assert message.startswith(
        f"no executor host has 2 CPUs (largest: 1 CPU; hosts: {executor_id(only_small)} (1 CPU, "
    ), message
    assert message.endswith("; waited 5 s for one to start")
    assert attempt["result"]["exception_type"] == "NoCapacityError"
    assert detail["benchmark_run"]["status"] == "failed"
    assert (
        detail["benchmark_run"]["status_reason"]
        == f"every attempt errored (1 of 1); error: NoCapacityError: {message}"
    )
    assert [len(ends) for ends in finished_by_attempt(stack, run["id"]).values()] == [1]
