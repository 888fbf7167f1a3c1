"""Issue 37, finding 2, on a real engine: the writable layer's cap counts entries (files, folders, links)
and folder blocks, not only the bytes of regular files. Under `storage_mb = 64` a layer may hold 16,384
entries (one per 4 KiB); past them the container is killed and the attempt `failed` naming the count.

The engine's own measure (`SizeRw`) let 300,000 empty files with long names pass as 549 bytes."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from regatta_executor.attempt.sandbox_faults import StorageLimitExceededError
from regatta_executor.container.files.layer_usage import EngineLayer, HostLayer, layer_bytes, measurer
from regatta_executor.container.files.storage_cap import StorageCap, entry_limit

from tests.integration.container_support import (
    BASE_IMAGE,
    containers_of,
    exception_type,
    outcome,
    rewards,
    run_trial,
    started_environment,
    trial_dir,
    write_task,
)

pytestmark = [pytest.mark.timeout(240), pytest.mark.usefixtures("built_images_removed")]

CAP = "storage_mb = 64\n"
OVER_ENTRIES = re.compile(
    r"storage limit exceeded \(([\d,]+) files and folders > 16,384, one per 4 KiB of 64 MiB\)"
)
# 300,000 empty files, each name 200 bytes and more, as fast as one process makes them; then a mark that
# it got to the end.
EMPTY_FILES = """
python3 - <<'PY'
import os
os.makedirs("/var/tmp/many", exist_ok=True)
os.chdir("/var/tmp/many")
name = "n" * 200
for i in range(300_000):
    os.close(os.open(f"{name}{i}", os.O_CREAT | os.O_WRONLY, 0o644))
PY
echo done > /logs/agent/made-all.txt
"""


def _count(message: str) -> int:
    found = OVER_ENTRIES.fullmatch(message)
    assert found, message
    return int(found.group(1).replace(",", ""))


def test_the_entry_limit_is_one_per_4_kib_of_the_cap() -> None:
    assert (entry_limit(64), entry_limit(1), entry_limit(10240)) == (16_384, 256, 2_621_440)


async def test_300k_empty_files_fail_the_attempt_naming_the_count(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    task = write_task(
        tmp_path / "tasks",
        "empty-files",
        solve=EMPTY_FILES,
        test="echo 1 > /logs/verifier/reward.txt\n",
        environment=CAP,
    )
    result = await run_trial(task, "oracle", tmp_path)
    assert exception_type(result) == "StorageLimitExceededError", result.exception_info
    count = _count(result.exception_info.exception_message)
    # Killed soon past the limit: long before the 300,000 (what was made between two measures passes it).
    assert 16_384 < count < 300_000, count
    assert not (trial_dir(tmp_path, result) / "agent" / "made-all.txt").exists(), "stopped before the end"
    assert rewards(result) is None and outcome(result) == "failed"
    assert containers_of(engine, result.trial_name) == []


async def test_honest_work_under_the_cap_passes(engine: docker.DockerClient, tmp_path: Path) -> None:
    """12,000 entries (10,000 of them empty files), 2,000 small files in 40 folders and 20 MiB of data:
    under both limits, the attempt passes."""
    solve = """
python3 - <<'PY'
import os
for d in range(40):
    os.makedirs(f"/app/work/src/d{d}", exist_ok=True)
for i in range(2_000):
    with open(f"/app/work/src/d{i % 40}/f{i}.py", "w") as f:
        f.write("x = 1\\n" * 150)
os.makedirs("/app/work/empty")
for i in range(10_000):
    open(f"/app/work/empty/e{i}", "w").close()
PY
head -c 20M /dev/urandom > /app/work/data.bin
"""
    test = """
files=$(find /app/work -type f | wc -l)
if [ "$files" = 12001 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
"""
    task = write_task(tmp_path / "tasks", "honest", solve=solve, test=test, environment=CAP)
    result = await run_trial(task, "oracle", tmp_path)
    assert (exception_type(result), outcome(result)) == (None, "passed"), result.exception_info


def _python(code: str) -> str:
    return f"python3 -c '{code}'; sleep 30"


@pytest.mark.parametrize(
    ("attack", "reason"),
    [
        # One file, 20,000 names: each name is an entry (and a place in a folder's blocks).
        (
            _python(
                'import os; os.mkdir("/var/tmp/l"); open("/var/tmp/one", "w").close()\n'
                'for i in range(20000): os.link("/var/tmp/one", f"/var/tmp/l/{i}")'
            ),
            OVER_ENTRIES,
        ),
        # Links take no block either.
        (
            _python(
                'import os; os.mkdir("/var/tmp/l")\nfor i in range(20000): os.symlink("/", f"/var/tmp/l/{i}")'
            ),
            OVER_ENTRIES,
        ),
        # A sparse file counts its size (its blocks would be none).
        (
            "truncate -s 1G /var/tmp/sparse; sleep 30",
            re.compile(r"storage limit exceeded \((\d+) MiB > 64 MiB\)"),
        ),
        # Deeper than the walk goes: over the cap itself.
        (
            _python('import os; os.chdir("/var/tmp")\nfor i in range(300): os.mkdir("d"); os.chdir("d")'),
            re.compile(r"storage limit exceeded \(folders nested deeper than 256 levels\)"),
        ),
    ],
    ids=["hard-links", "symlinks", "sparse", "deep"],
)
async def test_what_takes_no_block_still_counts(
    engine: docker.DockerClient, tmp_path: Path, attack: str, reason: re.Pattern[str]
) -> None:
    task = write_task(tmp_path / "tasks", "attack", environment=CAP)
    async with started_environment(tmp_path, task) as env:
        with env.scoped_exec_env({}), pytest.raises(StorageLimitExceededError) as raised:
            await env.exec(attack)
    found = reason.fullmatch(str(raised.value))
    assert found, raised.value
    if reason is OVER_ENTRIES:
        assert 16_384 < _count(str(raised.value)) <= 20_010, raised.value
    elif found.groups():
        assert 1024 <= int(found.group(1)) <= 1025, raised.value  # 1 GiB, and the folders it is in


async def test_the_verifiers_files_do_not_count_against_the_agents_entries(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    """The tests written at the turn's end are the platform's: 2,000 of them beside 15,000 empty files
    of the agent's pass the check under a limit of 16,384; 17,000 of the agent's do not."""
    tests = tmp_path / "tests"
    tests.mkdir()
    for index in range(2_000):
        (tests / f"t{index}.txt").write_text("x\n")
    for made, passes in ((15_000, True), (17_000, False)):
        task = write_task(tmp_path / f"tasks-{made}", "tests", environment=CAP)
        async with started_environment(tmp_path / f"run-{made}", task) as env:
            assert env._storage_cap is not None
            await env._storage_cap.stop()  # only the check at the turn's end measures
            with env.scoped_exec_env({}):
                wrote = await env.exec(f"mkdir /var/tmp/m && cd /var/tmp/m && touch $(seq {made})")
                assert wrote.return_code == 0, wrote
            await env.exec("rm -f -- /logs/verifier/reward.txt /logs/verifier/reward.json", user="root")
            await env.upload_dir(tests, "/tests")
            if passes:
                seen = await env.exec("ls /tests | wc -l", user="root")
                assert seen.stdout == "2000\n", seen
            else:
                with pytest.raises(StorageLimitExceededError) as raised:
                    await env.exec("true", user="root")
                # Its files, their folders and the few the engine and the platform make (/logs, /tests).
                assert 17_000 < _count(str(raised.value)) < 17_020, raised.value


# --- the cap's parts on a container of the test's own ---------------------------------------------------


@pytest.fixture
def container(engine: docker.DockerClient) -> Iterator[str]:
    made = engine.containers.run(BASE_IMAGE, ["sleep", "600"], detach=True, network_mode="none")
    try:
        yield str(made.id)
    finally:
        made.remove(force=True)


def _run(engine: docker.DockerClient, container: str, script: str) -> None:
    code, output = engine.containers.get(container).exec_run(["sh", "-c", script])
    assert code == 0, output


def test_the_engines_measure_counts_what_the_hosts_walk_counts(
    engine: docker.DockerClient, container: str
) -> None:
    """Where the layer's folder is not this host's, the engine's list of changes counts its entries: the
    same names the walk counts (an image file deleted is one too), and stops reading past a limit."""
    api = engine.api
    assert isinstance(measurer(api, container), HostLayer), "this host has the engine's folders"
    _run(engine, container, "mkdir -p /var/tmp/e/sub && cd /var/tmp/e && touch $(seq 3000) && rm /etc/issue")
    walked, listed = measurer(api, container).measure(), EngineLayer(api, container).measure()
    assert walked.entries >= 3_003 and walked.complete, walked
    assert abs(listed.entries - walked.entries) <= 5, (listed, walked)
    assert listed.bytes == layer_bytes(api, container)
    stopped = EngineLayer(api, container).measure(entry_limit=1_000)
    assert (stopped.complete, stopped.entries > 1_000) == (False, True), stopped
    assert stopped.entries < 3_000, "read no further than needed"


async def test_the_cap_on_the_engines_measure_kills_and_names_the_count(
    engine: docker.DockerClient, container: str
) -> None:
    cap = StorageCap(engine.api, container, 16, layer=EngineLayer(engine.api, container))
    await cap.check()
    assert not cap.exceeded
    _run(engine, container, "mkdir /var/tmp/e && cd /var/tmp/e && touch $(seq 5000)")
    with pytest.raises(StorageLimitExceededError) as raised:
        await cap.check()
    found = re.fullmatch(
        r"storage limit exceeded \(([\d,]+) files and folders > 4,096, one per 4 KiB of 16 MiB\)",
        str(raised.value),
    )
    assert found and 5_000 < int(found.group(1).replace(",", "")) < 5_010, raised.value
    assert engine.containers.get(container).status == "exited", "killed"


async def test_an_engine_quota_on_bytes_leaves_the_entries_measured(
    engine: docker.DockerClient, container: str
) -> None:
    """Where the engine holds the layer's bytes to the cap (`storage_opt` size), the cap leaves bytes to
    it and still counts the entries, which no engine quota does."""
    cap = StorageCap(engine.api, container, 16, bytes_enforced=True)
    _run(engine, container, "head -c 40M /dev/zero > /var/tmp/big")
    await cap.check()  # 40 MiB over a 16 MiB cap: the engine's to refuse, not the measure's
    assert not cap.exceeded
    _run(engine, container, "mkdir /var/tmp/e && cd /var/tmp/e && touch $(seq 5000)")
    with pytest.raises(StorageLimitExceededError, match=r"\(5,\d{3} files and folders > 4,096"):
        await cap.check()
