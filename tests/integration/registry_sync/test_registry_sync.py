"""Issue 4: registry-sync's service layer on a real event store and the real NATS object store.

Paged sync of a large registry with progress, Harbor's content digests, redelivery after a crash, and
versions: a re-sync of changed content is a new version whose archives sit beside the old ones.
"""

from __future__ import annotations

import collections
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from harbor.models.dataset.manifest import DatasetManifest
from harbor.publisher.packager import Packager
from regatta_registry_sync.sync import initial_sync_id

from ..registry_sync_support import (
    EXAMPLE_TASKS,
    SyncHarness,
    copy_examples,
    folder_source,
    generate_registry,
    registry_source,
    sync_harness,
)


@pytest.fixture
async def harness(database_url: str, nats_url: str) -> AsyncIterator[SyncHarness]:
    async with sync_harness(database_url, nats_url, page_size=3) as h:
        yield h


async def test_registry_of_1050_tasks_syncs_in_pages_with_progress(
    postgres_url: str, nats_url: str, tmp_path: Path
) -> None:
    registry = generate_registry(tmp_path / "big", 1050)
    async with sync_harness(postgres_url, nats_url, page_size=50) as h:
        benchmark_id = h.add(registry_source(registry, "generated"))
        seen: list[tuple[int, str, int]] = []

        async def on_page(synced: int, total: int) -> None:
            # What a user polling the benchmark sees between two pages.
            row = h.benchmark(benchmark_id)
            seen.append((row["synced_task_count"], row["sync_status"], row["task_count"]))

        body = await h.first_sync(benchmark_id, on_page=on_page)

        pages = h.events(benchmark_id, "BenchmarkTasksSynced")
        assert [e.data["page"] for e in pages] == list(range(1, 22))
        assert all(len(e.data["tasks"]) == 50 for e in pages)
        midway = [s for s in seen if 0 < s[0] < 1050]
        assert len(midway) == 20 and all(status == "syncing" and total == 1050 for _, status, total in midway)
        assert body["sync_status"] == "ready" and body["task_count"] == 1050 and body["version"] == "1.0"
        assert collections.Counter(task["category"] for task in body["tasks"]) == {
            c: 210 for c in ("math", "text", "files", "scripting", "data")
        }
        difficulties = collections.Counter(task["difficulty"] for task in body["tasks"])
        assert difficulties == {"easy": 263, "medium": 263, "hard": 262, None: 262}
        assert body["category_count"] == 5

        # Harbor's hashes: a task's digest is Packager's; the benchmark's is Harbor's dataset manifest hash.
        first = body["tasks"][0]
        assert (
            first["digest"]
            == "sha256:" + Packager.compute_content_hash(registry.parent / "tasks/gen-0000")[0]
        )
        manifest = DatasetManifest.model_validate(
            {
                "dataset": {"name": "regatta/generated"},
                "tasks": [{"name": f"regatta/{t['name']}", "digest": t["digest"]} for t in body["tasks"]],
            }
        )
        assert body["digest"] == "sha256:" + manifest.compute_content_hash()

        # Redelivered request: nothing new is appended.
        before = len(h.events(benchmark_id))
        await h.sync.run(benchmark_id, initial_sync_id(benchmark_id))
        assert len(h.events(benchmark_id)) == before


async def test_example_folder_syncs_and_archives_hold_exactly_the_hashed_files(
    harness: SyncHarness, tmp_path: Path
) -> None:
    benchmark_id = harness.add(folder_source(EXAMPLE_TASKS))
    body = await harness.first_sync(benchmark_id)

    assert body["sync_status"] == "ready", body.get("sync_error")
    assert body["task_count"] == 10 and len(harness.events(benchmark_id, "BenchmarkTasksSynced")) == 4
    assert body["version"] == body["digest"].removeprefix("sha256:")[:12]
    by_name = {task["name"]: task for task in body["tasks"]}
    assert by_name["collatz-steps"]["category"] == "math" and by_name["collatz-steps"]["difficulty"] == "hard"
    assert by_name["collatz-steps"]["tags"] == ["math", "python"]
    for name in ("hello-file", "rot13"):
        digest = by_name[name]["digest"]
        assert digest == "sha256:" + Packager.compute_content_hash(EXAMPLE_TASKS / name)[0]
        # Unpacked as the executor unpacks it, the archive hashes to the digest it is stored under.
        await _unpack(harness, digest, tmp_path / name)
        assert "sha256:" + Packager.compute_content_hash(tmp_path / name)[0] == digest
        assert (tmp_path / name / "tests" / "test.sh").stat().st_mode & 0o111


async def test_links_inside_a_task_are_archived_as_the_files_they_name(
    harness: SyncHarness, tmp_path: Path
) -> None:
    tasks = copy_examples(tmp_path / "tasks")
    (tasks / "rot13" / "tests" / "solve-copy.sh").symlink_to("../solution/solve.sh")
    benchmark_id = harness.add(folder_source(tasks))

    body = await harness.first_sync(benchmark_id)

    rot13 = next(t for t in body["tasks"] if t["name"] == "rot13")
    assert rot13["digest"] == "sha256:" + Packager.compute_content_hash(tasks / "rot13")[0]
    files = await harness.archive_files(rot13["digest"])
    assert files["tests/solve-copy.sh"] == (tasks / "rot13" / "solution" / "solve.sh").read_bytes()


async def test_redelivery_after_a_crash_mid_sync_completes_without_duplicate_pages(
    harness: SyncHarness, tmp_path: Path
) -> None:
    benchmark_id = harness.add(folder_source(copy_examples(tmp_path / "tasks")))

    async def crash_after_page_two(synced: int, _total: int) -> None:
        if synced >= 6:
            raise ConnectionError("registry-sync died")

    with pytest.raises(ConnectionError):
        await harness.first_sync(benchmark_id, on_page=crash_after_page_two)
    assert harness.benchmark(benchmark_id)["sync_status"] == "syncing"
    assert harness.benchmark(benchmark_id)["synced_task_count"] == 6

    body = await harness.first_sync(benchmark_id)

    assert [e.data["page"] for e in harness.events(benchmark_id, "BenchmarkTasksSynced")] == [1, 2, 3, 4]
    assert len(harness.events(benchmark_id, "BenchmarkSyncStarted")) == 1
    assert body["sync_status"] == "ready" and body["task_count"] == 10 and body["synced_task_count"] == 10


async def test_source_changed_between_deliveries_fails_instead_of_mixing_versions(
    harness: SyncHarness, tmp_path: Path
) -> None:
    tasks = copy_examples(tmp_path / "tasks")
    benchmark_id = harness.add(folder_source(tasks))

    async def crash(synced: int, _total: int) -> None:
        raise ConnectionError("registry-sync died")

    with pytest.raises(ConnectionError):
        await harness.first_sync(benchmark_id, on_page=crash)
    (tasks / "collatz-steps" / "instruction.md").write_text("A different instruction\n")

    body = await harness.first_sync(benchmark_id)

    assert body["sync_status"] == "failed"
    assert "changed while this sync was retried (page 1)" in body["sync_error"]
    assert (await harness.retry(benchmark_id))["sync_status"] == "ready"


async def test_resync_of_changed_content_is_a_new_version_and_old_archives_stay(
    harness: SyncHarness, tmp_path: Path
) -> None:
    tasks = copy_examples(tmp_path / "tasks")
    benchmark_id = harness.add(folder_source(tasks))
    first = await harness.first_sync(benchmark_id)
    old = {t["name"]: t["digest"] for t in first["tasks"]}
    test_script = tasks / "rot13" / "tests" / "test.sh"
    old_script = test_script.read_bytes()
    test_script.write_text("#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n")

    second = await harness.retry(benchmark_id)

    new = {t["name"]: t["digest"] for t in second["tasks"]}
    assert second["sync_status"] == "ready"
    assert (second["version"], second["digest"]) != (first["version"], first["digest"])
    assert {name for name in old if old[name] != new[name]} == {"rot13"}
    assert (await harness.archive_files(old["rot13"]))["tests/test.sh"] == old_script
    assert b"echo 0" in (await harness.archive_files(new["rot13"]))["tests/test.sh"]


async def test_failed_resync_keeps_the_last_good_version_for_display(
    harness: SyncHarness, tmp_path: Path
) -> None:
    tasks = copy_examples(tmp_path / "tasks")
    benchmark_id = harness.add(folder_source(tasks))
    good = await harness.first_sync(benchmark_id)
    # A dataset-level problem (a broken task alone is listed invalid and the rest syncs).
    (tasks / "regatta.toml").write_text('[benchmark]\npass_threshold = "high"\n')

    failed = await harness.retry(benchmark_id)

    assert failed["sync_status"] == "failed"
    assert failed["sync_error"] == (
        f"manifest {tasks.resolve()}/regatta.toml: [benchmark].pass_threshold must be a number (got 'high')"
    )
    assert (failed["version"], failed["digest"]) == (good["version"], good["digest"])
    assert [t["digest"] for t in failed["tasks"]] == [t["digest"] for t in good["tasks"]]
    for task in good["tasks"]:
        assert await harness.bucket.get_info(task["digest"])


async def _unpack(harness: SyncHarness, digest: str, target: Path) -> None:
    import io

    result = await harness.bucket.get(digest)
    with tarfile.open(fileobj=io.BytesIO(result.data or b""), mode="r:gz") as archive:
        archive.extractall(target, filter="data")


async def test_manifest_beside_registry_and_deployment_metadata_become_the_benchmark_metadata(
    harness: SyncHarness, tmp_path: Path
) -> None:
    registry = generate_registry(tmp_path / "judged", 6)
    (registry.parent / "regatta.toml").write_text(
        "schema_version = 1\n"
        '[benchmark]\ndescription = "Six judged tasks"\npass_threshold = 0.75\nprimary_reward_key = "score"\n'
        'verifier_integrity = "enforce"\nshow_solutions = false\n'
        '[harness]\ndefault = "terminus-2"\nrequired = true\n'
        '[judge]\nrequires_model = true\nrequires_api_key = true\ndefault_model = "openai/gpt-5-mini"\n'
        '[task_sets.parity]\ntasks = ["gen-0001", "gen-000[45]"]\nrecommended = true\n'
        '[task_sets]\nsmoke = ["gen-0000"]\n'
    )
    declared = {"pass_threshold": 0.5, "task_sets": {"smoke": ["gen-0002"], "all-odd": ["gen-000[135]"]}}
    benchmark_id = harness.add(registry_source(registry, "generated", metadata=declared))

    body = await harness.first_sync(benchmark_id)

    assert body["sync_status"] == "ready", body.get("sync_error")
    # Field by field the deployment's values win over the manifest's; task sets merge set by set.
    assert body["metadata"] == {
        "description": "Six judged tasks",
        "default_harness": "terminus-2",
        "supports_harness": True,
        "requires_harness": True,
        "requires_judge_model": True,
        "requires_judge_api_key": True,
        "judge_model_default": "openai/gpt-5-mini",
        "pass_threshold": 0.5,
        "primary_reward_key": "score",
        "verifier_integrity": "enforce",
        "show_solutions": False,
        "task_sets": {
            "parity": ["gen-0001", "gen-0004", "gen-0005"],
            "smoke": ["gen-0002"],
            "all-odd": ["gen-0001", "gen-0003", "gen-0005"],
        },
        "recommended_task_set": "parity",
    }
