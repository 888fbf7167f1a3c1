"""A task's `[environment].storage_mb` is a disk request (Harbor's reading): with the `container`
environment and no REGATTA_MAX_STORAGE_MB, its ceiling is the disk of the real Docker engine's data root,
not half the host's RAM. A task asking 20 GiB is listed valid at sync (real registry-sync, event store and
NATS object store), passes the executor's own check and runs to reward 1 in a container; one asking
10 PB is listed invalid and refused by the executor, naming the field and the disk's size."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import docker
import pytest
from regatta_executor.environments.choice import EnvironmentChoice
from regatta_executor.tasks.ceilings import check_ceilings, executor_ceilings
from regatta_executor.tasks.environment import TaskEnvironmentError
from regatta_shared.rules.sandbox_disk import DEFAULT_DOCKER_HOST, sandbox_disk
from regatta_shared.settings import Settings

from ..container_support import rewards, run_trial
from ..container_support import write_task as write_container_task
from ..registry_sync_support import SyncHarness, folder_source, sync_harness, write_task

pytestmark = pytest.mark.timeout(300)
MIB = 1024 * 1024
TWENTY_GIB_MB = 20 * 1024
TEN_PB_MB = 10 * 1024**3


def _engine_disk(engine: docker.DockerClient) -> tuple[str, int]:
    """The engine's data root and its filesystem's size in MiB, measured apart from the code under test."""
    root = engine.info()["DockerRootDir"]
    total = shutil.disk_usage(root).total // MIB
    # The test's premise: a disk that holds 20 GiB, on a host whose RAM is what refused it before.
    assert total > TWENTY_GIB_MB, f"the engine's disk ({total} MiB) cannot hold the 20 GiB task"
    return root, total


def _refusal(root: str, total: int) -> str:
    return (
        f"[environment].storage_mb = {TEN_PB_MB} exceeds the {total} MiB of this host's disk, the "
        f"filesystem of the Docker engine's data root {root} (REGATTA_MAX_STORAGE_MB sets another ceiling)"
    )


@pytest.fixture
def container_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Every process's environment with the `container` environment and no storage ceiling set."""
    monkeypatch.setenv("REGATTA_EXECUTOR_ENVIRONMENT", "container")
    monkeypatch.setenv("REGATTA_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("REGATTA_MAX_STORAGE_MB", raising=False)
    return Settings()  # type: ignore[call-arg]


@pytest.fixture
async def harness(tmp_path: Path, nats_url: str, container_settings: Settings) -> AsyncIterator[SyncHarness]:
    async with sync_harness(f"sqlite:///{tmp_path / 'events.db'}", nats_url) as h:
        yield h


def test_the_container_environments_disk_is_the_engines_data_root(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    root, total = _engine_disk(engine)
    disk = sandbox_disk("container", docker_host=DEFAULT_DOCKER_HOST, data_dir=tmp_path / "data")
    assert disk is not None
    assert (disk.mib, disk.what) == (
        total,
        f"this host's disk, the filesystem of the Docker engine's data root {root}",
    )


async def test_20_gib_is_listed_valid_and_10_pb_invalid_naming_the_field_and_the_disk(
    engine: docker.DockerClient, harness: SyncHarness, tmp_path: Path
) -> None:
    root, total = _engine_disk(engine)
    dataset = tmp_path / "ds"
    for index, (name, storage_mb) in enumerate([("twenty-gib", TWENTY_GIB_MB), ("ten-pb", TEN_PB_MB)]):
        write_task(dataset / name, index)
        toml = dataset / name / "task.toml"
        toml.write_text(toml.read_text() + f"[environment]\nstorage_mb = {storage_mb}\n")

    body = await harness.first_sync(harness.add(folder_source(dataset)))

    assert body["sync_status"] == "ready", body.get("sync_error")
    reasons = {task["name"]: task["invalid_reason"] for task in body["tasks"]}
    assert reasons == {"twenty-gib": None, "ten-pb": f"task 'ten-pb': {_refusal(root, total)}"}


@pytest.mark.usefixtures("built_images_removed")
async def test_the_executor_runs_a_20_gib_task_and_refuses_a_10_pb_one(
    engine: docker.DockerClient, container_settings: Settings, tmp_path: Path
) -> None:
    root, total = _engine_disk(engine)
    ceilings = executor_ceilings(container_settings, EnvironmentChoice("container"))
    tasks = tmp_path / "tasks"
    twenty = write_container_task(
        tasks,
        "twenty-gib",
        solve="echo done > /logs/agent/done.txt",
        test='[ "$(cat /logs/agent/done.txt)" = done ] && echo 1 > /logs/verifier/reward.txt',
        environment=f"storage_mb = {TWENTY_GIB_MB}\n",
    )
    huge = write_container_task(tasks, "ten-pb", environment=f"storage_mb = {TEN_PB_MB}\n")

    check_ceilings(ceilings, twenty, 1.0)
    with pytest.raises(TaskEnvironmentError) as refused:
        check_ceilings(ceilings, huge, 1.0)
    assert str(refused.value) == f"refused by this executor: {_refusal(root, total)}"

    result = await run_trial(twenty, "oracle", tmp_path / "run")
    assert rewards(result) == {"reward": 1.0}, result.exception_info
