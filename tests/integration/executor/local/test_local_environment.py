"""Regatta's `local` Harbor environment against real bubblewrap, through Harbor trials: the example tasks,
network isolation, a fork bomb, timeouts, a full disk, writes outside the sandbox, forged rewards and
planted links (test_local_sandbox.py drives an environment directly)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from regatta_executor.attempt.artifacts import collect

from tests.conftest import EXAMPLES
from tests.integration.local_environment_support import (
    assert_cleaned_up,
    example_tasks,
    exception_type,
    marker,
    outcome,
    processes_mentioning,
    require_sandbox_host,
    rewards,
    run_trial,
    write_task,
)

MULTI_METRIC_TASK = "rot13"

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def _sandbox_host(monkeypatch: pytest.MonkeyPatch) -> None:
    require_sandbox_host(monkeypatch)


def test_registry_lists_every_example_task() -> None:
    (dataset,) = json.loads((EXAMPLES / "registry.json").read_text())
    assert (dataset["name"], dataset["version"]) == ("regatta-examples", "1.0")
    listed = sorted(t["path"] for t in dataset["tasks"])
    assert listed == [f"tasks/{p.name}" for p in example_tasks()]
    assert len(listed) >= 8
    reward_json = [p.name for p in example_tasks() if "reward.json" in (p / "tests" / "test.sh").read_text()]
    assert reward_json == [MULTI_METRIC_TASK]


@pytest.mark.parametrize(
    ("agent", "expected", "expected_multi"),
    [("oracle", 1, {"reward": 1, "style": 0.5}), ("nop", 0, {"reward": 0, "style": 0})],
)
async def test_example_tasks_pass_with_oracle_and_fail_with_nop(
    tmp_path: Path, agent: str, expected: int, expected_multi: dict[str, float]
) -> None:
    tasks = example_tasks()
    results = await asyncio.gather(*(run_trial(task, agent, tmp_path) for task in tasks))

    for task, result in zip(tasks, results, strict=True):
        want = expected_multi if task.name == MULTI_METRIC_TASK else {"reward": expected}
        assert (task.name, exception_type(result)) == (task.name, None)
        assert (task.name, rewards(result)) == (task.name, want)
        assert result.reward_valid
    assert_cleaned_up(tmp_path, *(r.trial_name for r in results))


@pytest.mark.parametrize("network_mode", ["no-network", "allowlist", "public"])
async def test_the_hosts_loopback_is_unreachable_whatever_the_network_mode(
    tmp_path: Path, network_mode: str
) -> None:
    """The public case reaching the host: test_hostile_tasks.py (its own addresses too)."""
    reachable = False

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"hello from the host\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    test = f"""
        python3 - <<'PY'
        import socket
        try:
            with socket.create_connection(("127.0.0.1", {port}), timeout=3) as s:
                print("connected:", s.recv(100))
            reward = 1
        except OSError as exc:
            print("failed to connect:", exc)
            reward = 0
        open("/logs/verifier/reward.txt", "w").write(str(reward))
        PY
    """
    task = write_task(tmp_path / "tasks", f"net-{network_mode}", test=test, network_mode=network_mode)
    if network_mode == "allowlist":
        with (task / "task.toml").open("a") as toml:
            toml.write('allowed_hosts = ["127.0.0.1"]\n')
    async with server:
        result = await run_trial(task, "nop", tmp_path)

    assert exception_type(result) is None
    assert rewards(result) == {"reward": 1 if reachable else 0}
    log = (tmp_path / "trials" / result.trial_name / "verifier" / "test-stdout.txt").read_text()
    assert ("connected: b'hello from the host" in log) == reachable
    assert_cleaned_up(tmp_path, result.trial_name)


async def test_fork_bomb_in_the_agent_phase_is_contained(tmp_path: Path) -> None:
    bomb = """
        :(){ :|:& };:
        exec sleep 1000
    """
    task = write_task(tmp_path / "tasks", "fork-bomb", solve=bomb, agent_timeout_sec=3)
    result = await run_trial(task, "oracle", tmp_path, max_processes=64)

    assert exception_type(result) == "AgentTimeoutError"
    assert rewards(result) == {"reward": 0}
    assert result.reward_valid
    oracle_log = (tmp_path / "trials" / result.trial_name / "agent" / "oracle.txt").read_text()
    assert "Resource temporarily unavailable" in oracle_log
    assert_cleaned_up(tmp_path, result.trial_name)


@pytest.mark.parametrize("how", ["sleeps", "spins"])
async def test_never_ending_agent_ends_with_agent_timeout(tmp_path: Path, how: str) -> None:
    sleeper = marker("endless-agent")
    solve = {
        "sleeps": f"exec -a {sleeper} sleep 1000\n",
        "spins": f"(exec -a {sleeper} sleep 1000) & while :; do :; done\n",
    }[how]
    task = write_task(tmp_path / "tasks", "endless-agent", solve=solve, agent_timeout_sec=2)
    result = await run_trial(task, "oracle", tmp_path)

    assert exception_type(result) == "AgentTimeoutError"
    assert rewards(result) == {"reward": 0}
    assert outcome(result) == "failed", "an agent's own timeout is scored, not retried"
    assert processes_mentioning(sleeper) == []
    assert_cleaned_up(tmp_path, result.trial_name)


async def test_never_ending_verifier_ends_with_verifier_timeout(tmp_path: Path) -> None:
    sleeper = marker("endless-verifier")
    test = f"(exec -a {sleeper} sleep 1000)\necho 1 > /logs/verifier/reward.txt\n"
    task = write_task(tmp_path / "tasks", "endless-verifier", test=test, verifier_timeout_sec=3)
    result = await run_trial(task, "nop", tmp_path)

    assert exception_type(result) == "VerifierTimeoutError"
    assert processes_mentioning(sleeper) == []
    assert_cleaned_up(tmp_path, result.trial_name)


async def test_a_task_that_fills_the_disk_is_capped(tmp_path: Path) -> None:
    fill = """
        dd if=/dev/zero of=/app/fill bs=1M count=200 2> /logs/agent/dd-root.txt
        dd if=/dev/zero of=/tmp/fill bs=1M count=200 2> /logs/agent/dd-tmp.txt
        df -k / > /logs/agent/df.txt
        dd if=/dev/zero of=/logs/agent/fill bs=1M count=200 2> /logs/agent/dd-logs.txt
        for i in $(seq 1000); do echo $i > /app/small-$i || break; done
        exit 0
    """
    test = "test -s /app/fill && echo 0 > /logs/verifier/reward.txt || echo 1 > /logs/verifier/reward.txt\n"
    task = write_task(tmp_path / "tasks", "fill-disk", solve=fill, test=test, storage_mb=32)
    result = await run_trial(task, "oracle", tmp_path)

    assert exception_type(result) is None, "the verifier still ran after the disk filled"
    assert rewards(result) == {"reward": 0} and outcome(result) == "failed"
    agent = tmp_path / "trials" / result.trial_name / "agent"
    assert "No space left on device" in (agent / "dd-root.txt").read_text()
    assert "No space left on device" in (agent / "dd-tmp.txt").read_text()
    # The log folders are capped as a whole (test_hostile_tasks.py checks the total).
    assert (agent / "fill").stat().st_size <= 32 * 1024 * 1024
    assert int((agent / "df.txt").read_text().splitlines()[1].split()[1]) == 32 * 1024
    assert_cleaned_up(tmp_path, result.trial_name)


async def test_a_task_cannot_write_outside_its_sandbox(tmp_path: Path) -> None:
    tag = marker("escape")
    host_file = tmp_path / f"{tag}-host.txt"
    targets = [f"/etc/{tag}", f"/usr/local/{tag}", f"/var/tmp/{tag}", f"/opt/{tag}", str(host_file)]
    attempts = "\n".join(f"echo pwned 2>> /logs/agent/errors.txt > {t}" for t in targets)
    solve = f"""
        {attempts}
        mount -o remount,rw /usr 2>> /logs/agent/errors.txt
        mount -t tmpfs none /etc 2>> /logs/agent/errors.txt
        ln -s / /app/root-link && echo pwned 2>> /logs/agent/errors.txt > /app/root-link/etc/{tag}
        echo 4096 2>> /logs/agent/errors.txt > /proc/sys/kernel/pid_max
        ls /proc | grep -E '^[0-9]+$' | wc -l > /logs/agent/visible-pids.txt
        exit 0
    """
    task = write_task(tmp_path / "tasks", "escape", solve=solve)
    pid_max = Path("/proc/sys/kernel/pid_max").read_text()
    result = await run_trial(task, "oracle", tmp_path)

    assert exception_type(result) is None and outcome(result) == "failed"
    for target in targets:
        assert not Path(target).exists(), target
    assert Path("/proc/sys/kernel/pid_max").read_text() == pid_max
    agent = tmp_path / "trials" / result.trial_name / "agent"
    errors = (agent / "errors.txt").read_text()
    assert errors.count("Read-only file system") >= 4 and errors.count("permission denied") == 2, errors
    assert int((agent / "visible-pids.txt").read_text()) < 10, "the host's processes are not visible"
    assert_cleaned_up(tmp_path, result.trial_name)


async def test_a_reward_forged_by_the_agent_is_discarded(tmp_path: Path) -> None:
    # The second route: a file planted in /tests that the tests would pick up (think conftest.py).
    forge = """
        echo 1 > /logs/verifier/reward.txt
        echo '{"reward": 1}' > /logs/verifier/reward.json
        mkdir -p /tests/plugins && touch /tests/plugins/always-pass
    """
    test = """
        if [ -f /app/solved ] || [ -e /tests/plugins/always-pass ]; then
            echo 1 > /logs/verifier/reward.txt
        else
            echo 0 > /logs/verifier/reward.txt
        fi
    """
    task = write_task(tmp_path / "tasks", "forged-reward", solve=forge, test=test)
    result = await run_trial(task, "oracle", tmp_path)

    assert exception_type(result) is None
    assert rewards(result) == {"reward": 0}
    assert outcome(result) == "failed"
    assert_cleaned_up(tmp_path, result.trial_name)


async def test_artifacts_never_follow_links_planted_by_the_agent(tmp_path: Path) -> None:
    host_secret = tmp_path / "host-secret.txt"
    host_secret.write_text("host-only content\n")
    host_dir = tmp_path / "host-dir"
    host_dir.mkdir()
    (host_dir / "inside.txt").write_text("host-only content\n")
    plant = f"""
        echo kept > /logs/agent/kept.txt
        ln -s {host_secret} /logs/agent/host-file
        ln -s /etc/passwd /logs/verifier/passwd
        ln -s {host_dir} /logs/agent/host-dir
        mkdir -p /logs/artifacts/sub && ln -s ../../agent /logs/artifacts/sub/up
        mkfifo /logs/agent/fifo
    """
    task = write_task(tmp_path / "tasks", "plant-links", solve=plant)
    result = await run_trial(task, "oracle", tmp_path)
    trial_dir = tmp_path / "trials" / result.trial_name
    # Links planted in the log folders do not even reach the host's trial folder (the sandbox's log
    # folders are copied back as folders and regular files); a link made there on the host is still
    # not followed by the collection.
    assert not (trial_dir / "agent" / "host-file").is_symlink()
    assert (trial_dir / "agent" / "kept.txt").read_text() == "kept\n"
    (trial_dir / "agent" / "host-file").symlink_to(host_secret)
    (trial_dir / "agent" / "host-dir").symlink_to(host_dir)
    (trial_dir / "verifier" / "passwd").symlink_to("/etc/passwd")

    files = dict(await asyncio.wait_for(asyncio.to_thread(lambda: list(collect(trial_dir))), 10))

    assert files["agent/kept.txt"] == b"kept\n"
    assert "result.json" in files
    leaked = [p for p, data in files.items() if b"host-only content" in data or b"root:x:0:0" in data]
    assert leaked == []
    assert not {"agent/host-file", "verifier/passwd", "agent/fifo"} & set(files)
    assert not [p for p in files if p.startswith(("agent/host-dir/", "artifacts/sub/up/"))]


async def test_a_multi_step_task_runs_each_step_and_keeps_its_logs(tmp_path: Path) -> None:
    """Harbor moves each step's log folders aside between steps and refuses paths through links: the
    staged (capped) log folders must look like plain folders to it."""
    task = tmp_path / "tasks" / "two-steps"
    (task / "environment").mkdir(parents=True)
    (task / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    (task / "task.toml").write_text(
        'schema_version = "1.4"\n\n[environment]\nnetwork_mode = "no-network"\nstorage_mb = 64\n\n'
        '[[steps]]\nname = "one"\n\n[[steps]]\nname = "two"\n'
    )
    for step, check in (("one", "[ -f /app/one ]"), ("two", "[ -f /app/one ] && [ -f /app/two ]")):
        folder = task / "steps" / step
        for sub in ("solution", "tests"):
            (folder / sub).mkdir(parents=True)
        (folder / "instruction.md").write_text(f"Step {step}.\n")
        (folder / "solution" / "solve.sh").write_text(
            f"#!/bin/bash\necho {step} > /app/{step}\necho log-{step} > /logs/agent/{step}.txt\n"
        )
        (folder / "tests" / "test.sh").write_text(
            f"#!/bin/bash\n{check} && echo 1 > /logs/verifier/reward.txt"
            " || echo 0 > /logs/verifier/reward.txt\n"
        )
    result = await run_trial(task, "oracle", tmp_path)

    assert exception_type(result) is None
    assert [
        (s.step_name, s.verifier_result.rewards if s.verifier_result else None)
        for s in result.step_results or []
    ] == [
        ("one", {"reward": 1}),
        ("two", {"reward": 1}),
    ]
    trial_dir = tmp_path / "trials" / result.trial_name
    logs = sorted(
        p.relative_to(trial_dir).as_posix() for p in trial_dir.rglob("*.txt") if "log-" in p.read_text()
    )
    assert len(logs) == 2, logs
    assert_cleaned_up(tmp_path, result.trial_name)
