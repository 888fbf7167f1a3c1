"""The `container` environment on a real Docker engine: the attempt runs in its own container with the
task's limits and network, nothing the agent started survives into the verifier, and no container
outlives its attempt (its images: test_container_images.py; its files: test_container_files.py)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import docker
import pytest
from regatta_executor.container import janitor
from regatta_executor.container.engine import engine_answers
from regatta_executor.container.exec.commands import CommandTimeoutError

from tests.integration.container_support import (
    BASE_IMAGE,
    containers_of,
    exception_type,
    host_addresses,
    outcome,
    rewards,
    run_trial,
    started_environment,
    trial_dir,
    write_task,
)
from tests.integration.local_environment_support import require_sandbox_host
from tests.integration.local_environment_support import started_environment as started_local_environment

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("built_images_removed")]
# Docker's default capability set (what Harbor's docker environment gives a root process).
DOCKER_DEFAULT_CAPABILITIES = "00000000a80425fb"


def test_engine_answers(engine: docker.DockerClient, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert engine_answers() is True
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'no-engine.sock'}")
    assert engine_answers() is False


async def test_no_network_task_has_only_loopback(engine: docker.DockerClient, tmp_path: Path) -> None:
    task = write_task(
        tmp_path / "tasks",
        "offline",
        solve="ls /sys/class/net > /logs/agent/interfaces.txt",
        test="echo 1 > /logs/verifier/reward.txt",
    )
    result = await run_trial(task, "oracle", tmp_path)
    assert rewards(result) == {"reward": 1.0}, result.exception_info
    assert (trial_dir(tmp_path, result) / "agent" / "interfaces.txt").read_text().split() == ["lo"]


CONNECT = """
import socket, sys
for address in sys.argv[2:]:
    try:
        socket.create_connection((address, int(sys.argv[1])), timeout=2).close()
        print(address, "open")
    except OSError as exc:
        print(address, "blocked", type(exc).__name__)
"""


def _listen_on_all_addresses() -> tuple[socket.socket, int, threading.Event]:
    server = socket.create_server(("0.0.0.0", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                connection, _ = server.accept()
                connection.close()
            except OSError:
                continue

    threading.Thread(target=accept, daemon=True).start()
    return server, server.getsockname()[1], stop


async def test_public_task_cannot_reach_the_host(engine: docker.DockerClient, tmp_path: Path) -> None:
    """A service of this machine listening on every address (as NATS, the gateway or Postgres could)
    is reachable from a plain bridge network the test makes, and from none of its addresses out of a
    `public` task's container."""
    server, port, stop = _listen_on_all_addresses()
    addresses = host_addresses()
    assert addresses, "the machine has no address but loopback"
    network = engine.networks.create(f"regatta-test-{port}", driver="bridge")
    try:
        gateway = engine.networks.get(network.id).attrs["IPAM"]["Config"][0]["Gateway"]
        control = engine.containers.run(
            BASE_IMAGE,
            ["python3", "-c", CONNECT, str(port), gateway],
            network=network.name,
            remove=True,
        )
        assert b"open" in control, control  # the test can see a reachable host

        task = write_task(
            tmp_path / "tasks",
            "public",
            network_mode="public",
            solve=f"python3 -c '{CONNECT}' {port} {' '.join(addresses)} > /logs/agent/connect.txt\n"
            "ip -4 route | awk '/default/ {print $3}' | xargs python3 -c '"
            + CONNECT
            + f"' {port} >> /logs/agent/connect.txt\n",
            test="echo 1 > /logs/verifier/reward.txt",
        )
        result = await run_trial(task, "oracle", tmp_path)
    finally:
        network.remove()
        stop.set()
        server.close()
    lines = (trial_dir(tmp_path, result) / "agent" / "connect.txt").read_text().splitlines()
    assert len(lines) == len(addresses) + 1, lines
    assert all(" blocked " in line for line in lines), lines


FORKS = """
import os, signal, time
children, error = [], ""
try:
    for _ in range(200):
        pid = os.fork()
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        children.append(pid)
except OSError as exc:
    error = str(exc)
for pid in children:
    os.kill(pid, signal.SIGKILL)
print(len(children), error)
"""


async def test_memory_and_process_limits_end_the_attempt_as_failed(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    task = write_task(
        tmp_path / "tasks",
        "greedy",
        environment="memory_mb = 64\n",
        solve="""
            python3 -c 'b = bytearray(400 * 1024 * 1024); open("/app/allocated", "w").write("yes")'
            echo $? > /logs/agent/memory-exit.txt
            python3 -c "$FORKS" > /logs/agent/forks.txt
        """,
        test="if [ -f /app/allocated ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt",
    )
    solve = task / "solution" / "solve.sh"
    solve.write_text(solve.read_text().replace("#!/bin/bash\n", f"#!/bin/bash\nFORKS='{FORKS}'\n", 1))
    result = await run_trial(task, "oracle", tmp_path, max_processes=64)
    agent = trial_dir(tmp_path, result) / "agent"
    assert (agent / "memory-exit.txt").read_text().strip() == "137"  # killed by the OOM killer
    forked, error = (agent / "forks.txt").read_text().split(" ", 1)
    assert 0 < int(forked) < 64
    assert "Resource temporarily unavailable" in error
    assert rewards(result) == {"reward": 0.0}
    assert outcome(result) == "failed"
    assert containers_of(engine, result.trial_name) == []


async def test_never_ending_verifier_times_out_and_its_container_is_gone(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    task = write_task(tmp_path / "tasks", "endless", test="sleep 100000\n", verifier_timeout_sec=2)
    result = await run_trial(task, "oracle", tmp_path)
    assert exception_type(result) == "VerifierTimeoutError"
    # statistics.md §1: "once the agent phase has begun, a verifier that cannot run or conclude
    # because of the sandbox's state (... verifier timeout ...) scores the attempt `failed`".
    assert outcome(result) == "failed"
    assert containers_of(engine, result.trial_name) == []


async def test_under_enforce_agent_leftovers_are_gone_before_the_verifier_and_verifier_env_stays_with_it(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    task = write_task(
        tmp_path / "tasks",
        "leftovers",
        solve="""
            env > /logs/agent/env.txt
            nohup setsid bash -c 'while :; do echo 1 > /logs/verifier/reward.txt; sleep 0.05; done' \\
              >/dev/null 2>&1 &
            echo planted > /logs/verifier/planted.txt
            mkdir -p /tests && echo 'echo 1 > /logs/verifier/reward.txt; exit' > /tests/evil.sh
        """,
        test="""
            sleep 1
            if [ ! -e /logs/verifier/planted.txt ] && [ ! -e /tests/evil.sh ] \\
               && [ ! -e /logs/verifier/reward.txt ] && [ "$VERIFIER_ONLY" = "for-the-verifier" ]; then
              echo 1 > /logs/verifier/reward.txt
            else
              echo 0 > /logs/verifier/reward.txt
            fi
            ps -eo pid,ppid,comm,args > /logs/verifier/processes.txt
        """,
    )
    result = await run_trial(
        task,
        "oracle",
        tmp_path,
        verifier_env={"VERIFIER_ONLY": "for-the-verifier"},
        verifier_integrity="enforce",
    )
    verifier = trial_dir(tmp_path, result) / "verifier"
    processes = (verifier / "processes.txt").read_text()
    assert rewards(result) == {"reward": 1.0}, processes
    assert "do echo 1" not in processes
    # pid 1 (pid1.py, started again with the container) and its sleep, the platform's shell that reads
    # /logs/verifier back once the test ends, the verifier's command (test.sh, ps): nothing else. Under
    # `enforce` the verifier's commands start from the platform's shell (docs/reliability.md), which runs
    # Harbor's `(/tests/test.sh) > …` by exec, with no shell of the image's left in between.
    assert len(processes.splitlines()) == 1 + 5, processes
    assert "/.regatta/sh -c (/tests/test.sh)" not in processes and "bash -c" not in processes, processes
    (reader,) = [line for line in processes.splitlines() if "regatta-verifier-logs-" in line]
    assert reader.split()[2] == "sh" and reader.split()[3:5] == ["/.regatta/sh", "-c"], processes
    agent_env = (trial_dir(tmp_path, result) / "agent" / "env.txt").read_text()
    assert "REGATTA" not in agent_env or "VERIFIER_ONLY" not in agent_env
    assert "for-the-verifier" not in agent_env


async def test_timed_out_command_is_killed_with_what_it_started(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    async with started_environment(tmp_path) as env:
        with pytest.raises(CommandTimeoutError):
            await env.exec("sleep 1000 & sleep 1001 & sleep 1002", timeout_sec=1)
        left = await env.exec("ps -eo args")
        assert "sleep 100" not in (left.stdout or ""), left.stdout
        # the container itself lives on
        assert (await env.exec("echo alive")).stdout == "alive\n"


async def test_exec_honours_user_workdir_and_env(engine: docker.DockerClient, tmp_path: Path) -> None:
    async with started_environment(tmp_path) as env:
        result = await env.exec("id -u; pwd; echo $ONE", cwd="/tmp", env={"ONE": "1"}, user="nobody")
        assert result.stdout == "65534\n/tmp\n1\n"
        assert (await env.exec("pwd")).stdout == "/app\n"  # the image's WORKDIR
        assert (await env.exec("exit 7")).return_code == 7


async def test_stop_during_an_attempt_removes_its_container(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    task = write_task(tmp_path / "tasks", "slow", solve="sleep 1000\n", agent_timeout_sec=600)
    running = asyncio.create_task(run_trial(task, "oracle", tmp_path))
    name = ""
    for _ in range(600):  # until the agent runs in its container (30 s at most)
        trials = list((tmp_path / "trials").glob("*/agent")) if (tmp_path / "trials").exists() else []
        if trials and containers_of(engine, trials[0].parent.name):
            name = trials[0].parent.name
            break
        await asyncio.sleep(0.05)
    assert name, "the attempt's container never started"
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert containers_of(engine, name) == []


HOLD_A_CONTAINER = """
import asyncio, sys
sys.path.insert(0, sys.argv[2])
from pathlib import Path
from tests.integration.container_support import started_environment

async def main():
    async with started_environment(Path(sys.argv[1])) as env:
        print(env.container_name, flush=True)
        await asyncio.sleep(3600)

asyncio.run(main())
"""


def test_janitor_removes_containers_of_a_killed_executor_only(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    root = str(Path(__file__).resolve().parents[4])
    killed, alive = (
        subprocess.Popen(
            [sys.executable, "-c", HOLD_A_CONTAINER, str(tmp_path / name), root],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "HARBOR_TELEMETRY": "0"},
        )
        for name in ("killed", "alive")
    )
    try:
        assert killed.stdout and alive.stdout
        killed_name, alive_name = killed.stdout.readline().strip(), alive.stdout.readline().strip()
        assert killed_name and alive_name
        killed.kill()  # SIGKILL: no clean-up runs
        killed.wait(timeout=30)
        assert engine.containers.get(killed_name).status == "running"

        removed = janitor.sweep(engine, tmp_path / "killed" / "state" / "owners")
        assert removed == [killed_name], (removed, killed_name)
        with pytest.raises(docker.errors.NotFound):
            engine.containers.get(killed_name)
        # another live executor's container (its own owners folder) is not touched
        assert janitor.sweep(engine, tmp_path / "alive" / "state" / "owners") == []
        assert engine.containers.get(alive_name).status == "running"
    finally:
        for process in (killed, alive):
            process.kill()
            process.wait(timeout=30)
        janitor.sweep(engine, tmp_path / "alive" / "state" / "owners")


async def test_container_gets_no_privileges_kernel_tunables_or_engine(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    """What an attacker in a root task would try: rewrite a kernel tunable run by the host kernel as host
    root (core_pattern), read, change or replace the platform's programs, or talk to the engine. Root
    has Docker's default capabilities (as under Harbor), no more."""
    async with started_environment(tmp_path) as env:
        attrs = engine.api.inspect_container(env.container_name)
        host = attrs["HostConfig"]
        assert host["Privileged"] is False
        assert not host["CapAdd"] and not host["CapDrop"]
        # Of the host, only the platform's tools, read-only; the log folders are tmpfs volumes.
        assert host["Binds"] in (None, [])
        mounts = {m["Destination"]: m for m in attrs["Mounts"]}
        assert sorted(mounts) == ["/.regatta", "/logs", "/logs/verifier"]
        tools_mount = mounts.pop("/.regatta")
        assert (tools_mount["Type"], tools_mount["RW"]) == ("bind", False)
        assert tools_mount["Source"] == str(tmp_path / "state" / "tools")
        assert all(m["Type"] == "volume" and m["Driver"] == "local" for m in mounts.values())

        core = await env.exec("echo '|/tmp/x' > /proc/sys/kernel/core_pattern", user="root")
        assert core.return_code != 0 and "Read-only file system" in (core.stderr or "")
        status = (await env.exec("grep -E '^(NoNewPrivs|CapEff)' /proc/self/status", user="root")).stdout
        fields = dict(line.split(":\t") for line in (status or "").splitlines())
        assert fields["CapEff"].strip() == DOCKER_DEFAULT_CAPABILITIES
        tamper = await env.exec(
            "cat /.regatta/sh > /dev/null && echo read; ls /.regatta && echo listed;"
            "touch /.regatta/x && echo wrote; chmod 777 /.regatta/sh && echo changed;"
            "rm -f /.regatta/sleep && echo removed; true",
            user="root",
        )
        assert tamper.stdout == "", tamper
        sockets = await env.exec("ls /var/run/docker.sock /run/docker.sock 2>&1; echo $DOCKER_HOST")
        assert "No such file" in (sockets.stdout or "") and "docker.sock\n" not in (sockets.stdout or "")


async def test_exec_as_a_missing_user_fails_with_the_runtime_message(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    async with started_environment(tmp_path) as env:
        result = await env.exec("echo never", user="no-such-user")
        assert result.return_code == 126
        assert "no-such-user" in (result.stderr or "") and "never" not in (result.stdout or "")


async def test_a_public_local_sandbox_leaves_the_engines_view_of_running_containers_alone(
    engine: docker.DockerClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The local environment's network for public tasks (slirp4netns) once unmounted, on the host, every
    shared mount, the engine's mounts of running containers among them. The containers ran on, but the
    engine saw an empty folder for their files: an exec as a user name failed ("unable to find user
    root: no matching entries in passwd file") and the archive API lost every file."""
    require_sandbox_host(monkeypatch)
    async with started_environment(tmp_path / "container") as env:
        async with started_local_environment(tmp_path / "local") as local:
            assert local.network_policy.network_mode == "public"
            assert (await local.exec("echo sandboxed")).stdout == "sandboxed\n"
        by_name = engine.containers.get(env.container_name).exec_run(["true"], user="root")
        assert by_name.exit_code == 0, by_name.output
        await env.exec("echo written > /logs/agent/probe.txt")
        await env.download_file("/logs/agent/probe.txt", tmp_path / "probe.txt")
        assert (tmp_path / "probe.txt").read_text() == "written\n"
