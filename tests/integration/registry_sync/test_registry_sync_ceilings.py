"""Issue 27 findings 7 and 8 at sync: a task over the operator's ceilings (memory, storage, timeouts) or
whose files are a bomb (a 1 GiB file of zeros, 100,000 tiny files) is listed invalid, naming the field
and ceiling or the file and count, while the dataset's other tasks become ready. Real registry-sync over
a real event store and the real NATS object store; the gateway's projection reads what users see."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from harbor.publisher.packager import Packager

from ..registry_sync_support import SyncHarness, folder_source, sync_harness, write_task

pytestmark = pytest.mark.timeout(300)
GIB = 1024 * 1024 * 1024


@pytest.fixture
async def harness(
    tmp_path: Path, nats_url: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[SyncHarness]:
    # Explicit ceilings, so the expected messages do not depend on this machine's RAM and cores.
    for name, value in {
        "REGATTA_MAX_MEMORY_MB": "16384",
        "REGATTA_MAX_STORAGE_MB": "8192",
        "REGATTA_MAX_CPUS": "4",
        "REGATTA_MAX_AGENT_TIMEOUT_SEC": "3600",
        "REGATTA_MAX_VERIFIER_TIMEOUT_SEC": "1800",
        "REGATTA_MAX_BUILD_TIMEOUT_SEC": "1200",
    }.items():
        monkeypatch.setenv(name, value)
    async with sync_harness(f"sqlite:///{tmp_path / 'events.db'}", nats_url) as h:
        yield h


def _dataset(root: Path, broken: dict[str, str]) -> Path:
    """Two valid tasks `ok-1`, `ok-2`, and one per entry of `broken` whose task.toml gets the text."""
    for index, name in enumerate(["ok-1", "ok-2", *broken]):
        write_task(root / name, index)
        if name in broken:
            toml = root / name / "task.toml"
            toml.write_text(toml.read_text().replace("[agent]\ntimeout_sec = 60\n", "") + broken[name])
    return root


def _invalid(body: dict) -> dict[str, str]:
    return {task["name"]: task["invalid_reason"] for task in body["tasks"] if task["invalid_reason"]}


async def test_tasks_over_the_ceilings_are_listed_invalid_naming_field_and_ceiling(
    harness: SyncHarness, tmp_path: Path
) -> None:
    root = _dataset(
        tmp_path / "ds",
        {
            "huge-memory": "[environment]\nmemory_mb = 1048576\nstorage_mb = 1048576\n",
            "huge-cpus": "[environment]\ncpus = 64\n",
            "long-agent": "[agent]\ntimeout_sec = 86400\n",
            "long-build": "[environment]\nbuild_timeout_sec = 1e9\n",
            "nan-timeout": "[agent]\ntimeout_sec = nan\n",
        },
    )
    benchmark_id = harness.add(folder_source(root))

    body = await harness.first_sync(benchmark_id)

    assert body["sync_status"] == "ready", body.get("sync_error")
    assert body["task_count"] == 2
    assert [t["name"] for t in body["tasks"] if not t["invalid_reason"]] == ["ok-1", "ok-2"]
    assert _invalid(body) == {
        "huge-cpus": "task 'huge-cpus': [environment].cpus = 64 exceeds the operator's ceiling of 4 "
        "(REGATTA_MAX_CPUS)",
        "huge-memory": "task 'huge-memory': [environment].memory_mb = 1048576 exceeds the operator's "
        "ceiling of 16384 (REGATTA_MAX_MEMORY_MB); [environment].storage_mb = 1048576 exceeds the "
        "operator's ceiling of 8192 (REGATTA_MAX_STORAGE_MB)",
        "long-agent": "task 'long-agent': [agent].timeout_sec = 86400 exceeds the operator's ceiling of "
        "3600 (REGATTA_MAX_AGENT_TIMEOUT_SEC)",
        "long-build": "task 'long-build': [environment].build_timeout_sec = 1000000000 exceeds the "
        "operator's ceiling of 1200 (REGATTA_MAX_BUILD_TIMEOUT_SEC)",
        "nan-timeout": "task 'nan-timeout': [agent].timeout_sec = nan exceeds the operator's ceiling of "
        "3600 (REGATTA_MAX_AGENT_TIMEOUT_SEC)",
    }
    # Nothing of an invalid task reaches the object store; the valid ones' archives are there.
    [page] = harness.events(benchmark_id, "BenchmarkTasksSynced")
    assert [t["name"] for t in page.data["tasks"]] == ["ok-1", "ok-2"]
    for task in page.data["tasks"]:
        assert await harness.sync.archives.exists(task["digest"])
    for name in _invalid(body):
        digest = "sha256:" + Packager.compute_content_hash(root / name)[0]
        assert not await harness.sync.archives.exists(digest), name
    # What each valid task asks for is recorded, for the gateway's check at run submission.
    assert page.data["tasks"][0]["resources"]["agent_timeout_sec"] == 60


async def test_a_dataset_whose_every_task_is_invalid_fails_naming_the_first(
    harness: SyncHarness, tmp_path: Path
) -> None:
    root = tmp_path / "ds"
    write_task(root / "only", 0)
    (root / "only" / "instruction.md").unlink()
    benchmark_id = harness.add(folder_source(root))

    body = await harness.first_sync(benchmark_id)

    assert body["sync_status"] == "failed"
    assert (
        body["sync_error"]
        == "dataset ds has no valid task; the first: task 'only': instruction.md is missing"
    )


async def test_a_sparse_1_gib_file_of_zeros_is_refused_by_name_quickly_without_being_read(
    harness: SyncHarness, tmp_path: Path
) -> None:
    root = _dataset(tmp_path / "ds", {})
    write_task(root / "bomb", 9)
    zeros = root / "bomb" / "environment" / "zeros.bin"
    with zeros.open("wb") as handle:
        handle.truncate(GIB)  # sparse: 1 GiB long, no block written
    benchmark_id = harness.add(folder_source(root))
    started = time.monotonic()

    body = await harness.first_sync(benchmark_id)

    elapsed = time.monotonic() - started
    assert body["sync_status"] == "ready" and body["task_count"] == 2
    assert _invalid(body) == {
        "bomb": "task 'bomb': its files pass 512 MiB at environment/zeros.bin (1.0 GiB) (REGATTA_MAX_TASK_MB)"
    }
    # Hashing or archiving 1 GiB takes several seconds here; the refusal only stat()s the file.
    assert elapsed < 5, elapsed
    assert zeros.stat().st_blocks == 0, "the file was written to"


async def test_100k_tiny_files_are_refused_by_count(harness: SyncHarness, tmp_path: Path) -> None:
    root = _dataset(tmp_path / "ds", {})
    write_task(root / "many", 9)
    many = root / "many" / "tests" / "data"
    many.mkdir()
    for index in range(100_000):
        (many / f"{index:06d}").touch()
    benchmark_id = harness.add(folder_source(root))
    started = time.monotonic()

    body = await harness.first_sync(benchmark_id)

    assert body["sync_status"] == "ready" and body["task_count"] == 2
    assert _invalid(body) == {
        "many": "task 'many': more than 10000 files and folders (REGATTA_MAX_TASK_FILES)"
    }
    # The walk stops at the bound: far less than listing, hashing and archiving 100,000 files.
    assert time.monotonic() - started < 10
