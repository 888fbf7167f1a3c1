"""The end of the agent's turn in the `container` environment, on a real engine: the exec that ends the
turn (listing the agent's processes still alive, which keep running under the default `record` policy,
as under Harbor) also archives /logs when Harbor reads the agent's logs back, or writes the tests the
verifier's start uploads, so the attempt pays for no engine transfer of its own (verifier_turn.py,
`_end_agent_turn` and `_end_turn_for_verifier`). The engine's own event stream shows which operations
ran; what the agent wrote and what the verifier gets must be exactly what the engine's transfers give."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import docker
import pytest
from regatta_executor.attempt.sandbox_faults import StorageLimitExceededError
from regatta_executor.container.engine import client
from regatta_executor.container.turn_end import UploadNotWrittenError

from tests.integration.container_support import started_environment, write_task

pytestmark = [pytest.mark.timeout(180), pytest.mark.usefixtures("built_images_removed")]

LONG_NAME = "n" * 150 + ".txt"  # past a tar header's 100 bytes of name
REMOVE_REWARDS = "rm -f -- /logs/verifier/reward.txt /logs/verifier/reward.json"
# A process of the agent's in a session of its own, as a server it started would be.
BACKGROUND = "setsid sleep 300 > /dev/null 2>&1 < /dev/null & echo $! > /tmp/background.pid"
IS_ALIVE = 'kill -0 "$(cat /tmp/background.pid)" 2>/dev/null && echo alive || echo gone'


def engine_actions(engine: docker.DockerClient, container: str, since: float) -> list[str]:
    """The engine's events for `container` from `since` to now: `exec_create: ...`, `archive-path` (a
    read), `extract-to-dir` (an upload)."""
    time.sleep(0.2)  # the engine publishes an event just after answering the call
    events = engine.events(
        since=since - 0.05, until=time.time(), decode=True, filters={"container": container}
    )
    return [str(event.get("Action") or event.get("status")) for event in events]


def execs(actions: list[str]) -> int:
    return sum(action.startswith("exec_create") for action in actions)


async def test_reading_the_agent_logs_after_its_turn_ends_it_in_that_exec(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    """Harbor's read of /logs/agent once the agent's turn is over (outside scoped_exec_env) is one exec:
    the turn ends and /logs comes back in it, names past 100 bytes, folders and links as the agent left
    them; the verifier's start then runs nothing. The agent's process keeps running into verification
    (Harbor's semantics) and is recorded as alive when the verifier started."""
    async with started_environment(tmp_path) as env:
        container = env._running()
        with env.scoped_exec_env({}):
            wrote = await env.exec(
                "mkdir -p /logs/agent/sub && echo one > /logs/agent/a.txt && "
                f"echo two > /logs/agent/sub/{LONG_NAME} && ln -s a.txt /logs/agent/link && "
                f"head -c 300000 /dev/urandom > /logs/agent/blob && {BACKGROUND}"
            )
            assert wrote.return_code == 0, wrote
            blob = await env.exec("sha256sum /logs/agent/blob")
            await env.download_dir("/logs/agent", tmp_path / "mid-turn")
            assert (await env.exec(IS_ALIVE)).stdout == "alive\n"

        since = time.time()
        await env.download_dir("/logs/agent", tmp_path / "after")
        # The engine may stamp the test's own probe just before an event at `since` (seen under load):
        # only the environment's execs count here.
        actions = [a for a in engine_actions(engine, container, since) if IS_ALIVE not in a]
        assert execs(actions) == 1 and "archive-path" not in actions, actions

        after = tmp_path / "after"
        assert (after / "a.txt").read_text() == "one\n"
        assert (after / "sub" / LONG_NAME).read_text() == "two\n"
        assert (after / "link").is_symlink() and os.readlink(after / "link") == "a.txt"
        assert hashlib.sha256((after / "blob").read_bytes()).hexdigest() == blob.stdout.split()[0]

        since = time.time()
        removed = await env.exec(REMOVE_REWARDS, user="root")
        assert removed.return_code == 0
        assert execs(engine_actions(engine, container, since)) == 0
        tests = tmp_path / "tests"
        tests.mkdir()
        (tests / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
        await env.upload_dir(tests, "/tests")
        ran = await env.exec("bash /tests/test.sh && cat /logs/verifier/reward.txt", user="root")
        assert ran.stdout == "1\n", ran
        assert (await env.exec(IS_ALIVE, user="root")).stdout == "alive\n"
        evidence = env._integrity.record()
        # The sleep, and the shell that waits for it (the `&` above puts the whole `&&` chain in one).
        assert evidence.processes_total == 2, evidence.processes
        assert sorted((p.name, p.command[:9]) for p in evidence.processes) == [
            ("bash", "bash -c m"),
            ("sleep", "sleep 300"),
        ], evidence.processes


async def test_the_verifiers_start_writes_its_tests_from_the_exec_that_ends_the_turn(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    """Where the agent's logs were read during its turn (the oracle reads its log file itself), the
    exec that ends the turn at the verifier's start carries the tests as its input: no upload of its
    own, the agent's process still running (as under Harbor), and the tests as the engine's upload makes
    them (root's, modes and links kept, names past 100 bytes, a file larger than a pipe's buffer)."""
    async with started_environment(tmp_path) as env:
        container = env._running()
        with env.scoped_exec_env({}):
            started = await env.exec(BACKGROUND)
            assert started.return_code == 0, started
        tests = tmp_path / "tests"
        (tests / "data").mkdir(parents=True)
        (tests / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
        (tests / "test.sh").chmod(0o755)
        (tests / "data" / LONG_NAME).write_text("long\n")
        (tests / "data" / "blob").write_bytes(os.urandom(3 * 1024 * 1024))
        (tests / "data" / "link").symlink_to("blob")
        digest = hashlib.sha256((tests / "data" / "blob").read_bytes()).hexdigest()

        since = time.time()
        removed = await env.exec(REMOVE_REWARDS, user="root")
        assert removed.return_code == 0
        await env.upload_dir(tests, "/tests")
        seen = await env.exec(
            "cd /tests && stat -c '%A %U %G %n' test.sh data/link && readlink data/link && "
            f"cat data/{LONG_NAME} && sha256sum data/blob | cut -d' ' -f1 && {IS_ALIVE}",
            user="root",
        )
        actions = engine_actions(engine, container, since)
        assert execs(actions) == 2 and "extract-to-dir" not in actions, actions
        assert seen.stdout.splitlines() == [
            "-rwxr-xr-x root root test.sh",
            "lrwxrwxrwx root root data/link",
            "blob",
            "long",
            digest,
            "alive",
        ], seen
        assert env._integrity.record().processes_total == 1


async def test_the_tests_written_at_the_turns_end_do_not_count_against_the_agents_storage_cap(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    """storage_mb = 64: an agent that leaves 40 MiB passes the cap's check at its turn's end although
    the tests written in the same exec take the layer past 64 MiB."""
    task = write_task(tmp_path / "tasks", "cap", environment="storage_mb = 64\n")
    async with started_environment(tmp_path, task) as env:
        with env.scoped_exec_env({}):
            wrote = await env.exec("head -c 40M /dev/urandom > /var/tmp/agent-data")
            assert wrote.return_code == 0, wrote
        tests = tmp_path / "tests"
        tests.mkdir()
        (tests / "data").write_bytes(os.urandom(40 * 1024 * 1024))
        await env.exec(REMOVE_REWARDS, user="root")
        await env.upload_dir(tests, "/tests")
        seen = await env.exec("stat -c %s /tests/data", user="root")
        assert seen.stdout == f"{40 * 1024 * 1024}\n", seen


async def test_an_agent_over_its_cap_still_fails_at_its_turns_end(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    """The allowance is the tests' bytes, no more: an agent that left 80 MiB under a 64 MiB cap fails
    there, however small the tests."""
    task = write_task(tmp_path / "tasks", "over", environment="storage_mb = 64\n")
    async with started_environment(tmp_path, task) as env:
        await env._storage_cap.stop()  # only the check at the turn's end measures
        with env.scoped_exec_env({}):
            wrote = await env.exec("head -c 80M /dev/urandom > /var/tmp/agent-data")
            assert wrote.return_code == 0, wrote
        tests = tmp_path / "tests"
        tests.mkdir()
        (tests / "test.sh").write_text("#!/bin/bash\ntrue\n")
        await env.exec(REMOVE_REWARDS, user="root")
        await env.upload_dir(tests, "/tests")
        with pytest.raises(StorageLimitExceededError):
            await env.exec("true", user="root")


async def test_tests_that_cannot_be_written_are_the_platforms_failure_not_the_agents(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    """An upload the exec cannot write (a file where the upload needs a folder) fails the command that
    follows with the reason, as a refused engine upload would: not as the agent's sandbox fault."""
    async with started_environment(tmp_path) as env:
        with env.scoped_exec_env({}):
            await env.exec("echo x > /opt/blocked", user="root")
        source = tmp_path / "file.txt"
        source.write_text("data\n")
        await env.exec(REMOVE_REWARDS, user="root")
        await env.upload_file(source, "/opt/blocked/file.txt")
        with pytest.raises(UploadNotWrittenError, match="could not be written into the container"):
            await env.exec("true", user="root")


async def test_the_test_run_reads_the_verifiers_logs_back_in_its_own_exec(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    """Harbor's run of the test script (its output sent to test-stdout.txt) archives /logs/verifier in
    the same exec once the script ends: Harbor's read of the folder next makes no engine transfer and
    gets what the script left, and the command's exit code is the script's. The whole verifier is two
    execs (the one that ends the agent's turn, carrying the tests, and the test run) and no transfer."""
    async with started_environment(tmp_path) as env:
        container = env._running()
        tests = tmp_path / "tests"
        tests.mkdir()
        (tests / "test.sh").write_text(
            "#!/bin/bash\necho running the tests\necho 0.5 > /logs/verifier/reward.txt\n"
            f"echo detail > /logs/verifier/{LONG_NAME}\nexit 3\n"
        )
        (tests / "test.sh").chmod(0o755)
        since = time.time()
        await env.exec(REMOVE_REWARDS, user="root")
        await env.upload_dir(tests, "/tests")
        ran = await env.exec("(/tests/test.sh) > /logs/verifier/test-stdout.txt 2>&1")
        assert (ran.return_code, ran.stdout) == (3, ""), ran
        await env.download_dir("/logs/verifier", tmp_path / "verifier")
        actions = engine_actions(engine, container, since)
        transfers = {"archive-path", "extract-to-dir"} & set(actions)
        assert execs(actions) == 2 and not transfers, actions
        verifier = tmp_path / "verifier"
        assert (verifier / "reward.txt").read_text() == "0.5\n"
        assert (verifier / "test-stdout.txt").read_text() == "running the tests\n"
        assert (verifier / LONG_NAME).read_text() == "detail\n"


async def test_other_verifier_commands_are_run_as_they_are(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    """A verifier command that is not Harbor's test run keeps its output and reads nothing back."""
    async with started_environment(tmp_path) as env:
        container = env._running()
        await env.exec(REMOVE_REWARDS, user="root")
        since = time.time()
        ran = await env.exec("echo visible; exit 4")
        assert (ran.return_code, ran.stdout) == (4, "visible\n"), ran
        await env.download_dir("/logs/verifier", tmp_path / "verifier")
        assert "archive-path" in engine_actions(engine, container, since)


def test_the_engine_client_keeps_one_connection_pool(engine: docker.DockerClient) -> None:
    """docker-py keys its socket pools by URL; the executor's client has one, and reuses a connection
    across calls that name different objects."""
    api = client().api
    for container in engine.api.containers(all=True)[:5]:
        api.inspect_container(container["Id"])
    for _ in range(5):
        api.version()
        api.info()
        api.images(name="debian")
    pools = api.adapters["http+docker://"].pools
    assert len(pools) == 1
    pool = pools[next(iter(pools.keys()))]
    idle = [connection for connection in list(pool.pool.queue) if connection is not None]
    assert len(idle) == 1, idle
