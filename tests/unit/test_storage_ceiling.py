"""The default ceiling on a task's `[environment].storage_mb` (Harbor's disk request): the size of the disk
the sandboxes write on, not the host's RAM, unless the sandboxes keep a task's files in memory (`local`);
an operator's REGATTA_MAX_STORAGE_MB wins over both. The decision, and which disk a process measures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from regatta_executor.environments.choice import LOCAL_ENVIRONMENT, EnvironmentChoice
from regatta_executor.tasks.ceilings import executor_ceilings
from regatta_shared.events import TaskResources
from regatta_shared.rules.ceilings import Ceilings
from regatta_shared.rules.sandbox_disk import Disk, filesystem_mib, sandbox_disk
from regatta_shared.settings import Settings

MIB = 1024 * 1024
# A 252 GiB disk, as the executor of issue 36 had (with 24 GiB of RAM).
DISK = Disk(258_048, "this host's disk, the filesystem of the Docker engine's data root /var/lib/docker")
TEN_PB_MB = 10 * 1024**3


def _settings(**env: str) -> Settings:
    return Settings(**env)  # type: ignore[arg-type]


def _storage(mb: int) -> TaskResources:
    return TaskResources(storage_mb=mb)


def _ram_mb() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // MIB


def test_a_disk_request_of_20_gib_is_within_the_disk_though_over_half_the_ram() -> None:
    on_disk = Ceilings.from_settings(_settings(), DISK)
    assert on_disk.violations(_storage(20_480)) == []
    assert on_disk.violations(_storage(258_048)) == []
    # The same task against half this machine's RAM, the ceiling of the local sandbox's tmpfs, where
    # the RAM is small enough for it to be refused (this machine: under 40 GiB).
    in_memory = Ceilings.from_settings(_settings(), None)
    half = _ram_mb() // 2
    assert in_memory.values["storage_mb"].value == half
    if half < 20_480:
        assert in_memory.violations(_storage(20_480)) == [
            f"[environment].storage_mb = 20480 exceeds the {half} MiB of half this host's memory, where "
            "the local sandbox keeps a task's files (REGATTA_MAX_STORAGE_MB sets another ceiling)"
        ]


def test_more_than_the_disk_is_refused_naming_the_field_and_the_disk() -> None:
    assert Ceilings.from_settings(_settings(), DISK).violations(_storage(TEN_PB_MB)) == [
        "[environment].storage_mb = 10737418240 exceeds the 258048 MiB of this host's disk, the filesystem "
        "of the Docker engine's data root /var/lib/docker (REGATTA_MAX_STORAGE_MB sets another ceiling)"
    ]
    assert Ceilings.from_settings(_settings(), DISK).violations(_storage(258_049)) != []


def test_the_operators_setting_wins_over_the_disk() -> None:
    lower = Ceilings.from_settings(_settings(REGATTA_MAX_STORAGE_MB="8192"), DISK)
    assert lower.violations(_storage(20_480)) == [
        "[environment].storage_mb = 20480 exceeds the operator's ceiling of 8192 (REGATTA_MAX_STORAGE_MB)"
    ]
    # Higher than the disk too: the operator may know a disk this process cannot see.
    higher = Ceilings.from_settings(_settings(REGATTA_MAX_STORAGE_MB=str(10**9)), DISK)
    assert higher.violations(_storage(10**9)) == []


def test_the_other_ceilings_are_unchanged_by_the_disk() -> None:
    ceilings = Ceilings.from_settings(_settings(REGATTA_MAX_MEMORY_MB="4096"), DISK)
    assert ceilings.violations(TaskResources(memory_mb=8192, storage_mb=20_480)) == [
        "[environment].memory_mb = 8192 exceeds the operator's ceiling of 4096 (REGATTA_MAX_MEMORY_MB)"
    ]


@pytest.mark.parametrize("environment", ["local", " local ", LOCAL_ENVIRONMENT])
def test_the_local_environment_keeps_files_in_memory_and_measures_no_disk(
    tmp_path: Path, environment: str
) -> None:
    assert sandbox_disk(environment, docker_host="unix:///var/run/docker.sock", data_dir=tmp_path) is None


def test_an_executor_running_local_keeps_the_memory_ceiling(tmp_path: Path) -> None:
    """Whatever REGATTA_EXECUTOR_ENVIRONMENT said (`auto`): the executor's resolved `local`, by its
    traits (it runs on this host, in tmpfs), is measured against half the RAM."""
    settings = _settings(REGATTA_EXECUTOR_ENVIRONMENT="auto", REGATTA_DATA_DIR=str(tmp_path))
    storage = executor_ceilings(settings, EnvironmentChoice("local")).values["storage_mb"]
    assert (storage.value, storage.measured) == (
        _ram_mb() // 2,
        "half this host's memory, where the local sandbox keeps a task's files",
    )


def test_auto_with_no_engine_answering_is_local(tmp_path: Path) -> None:
    """No socket: executors of `auto` then choose `local`, whose files are in memory."""
    assert sandbox_disk("auto", docker_host=f"unix://{tmp_path}/no.sock", data_dir=tmp_path) is None


@pytest.mark.parametrize(
    ("environment", "docker_host"),
    [
        ("container", "unix://{tmp}/no.sock"),  # the engine's socket is not here (a gateway's container)
        ("container", "tcp://192.0.2.1:2376"),  # an engine on another host: not asked, its disk unseen
        ("auto", "tcp://192.0.2.1:2376"),
        ("docker", "unix://{tmp}/no.sock"),  # Harbor's own docker environment writes on the engine too
    ],
)
def test_a_process_that_cannot_see_the_engines_data_root_measures_its_data_folder(
    tmp_path: Path, environment: str, docker_host: str
) -> None:
    data_dir = tmp_path / "data" / "not-made-yet"
    disk = sandbox_disk(environment, docker_host=docker_host.format(tmp=tmp_path), data_dir=data_dir)
    stats = os.statvfs(tmp_path)
    assert disk == Disk(
        stats.f_blocks * stats.f_frsize // MIB,
        f"this host's disk, the filesystem of REGATTA_DATA_DIR {data_dir}, as the Docker engine's data "
        "root is not visible from this process",
    )


def test_a_filesystem_that_cannot_be_seen_has_no_size(tmp_path: Path) -> None:
    assert filesystem_mib(tmp_path / "missing") is None
    assert filesystem_mib("bad\0path") is None
    assert filesystem_mib(tmp_path) == os.statvfs(tmp_path).f_blocks * os.statvfs(tmp_path).f_frsize // MIB
