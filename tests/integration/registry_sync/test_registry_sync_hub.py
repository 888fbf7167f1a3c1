"""The Harbor hub source through Harbor's own registry, task and storage clients, pointed at a local stand-in
of the hub's Supabase PostgREST + Storage API (the only test double: it stands for an outside service)."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import harbor.auth.client
import pytest
from harbor.publisher.packager import Packager
from regatta_shared.events import BenchmarkSource

from ..archive_support import file_member, small_disk, zeros_bomb
from ..harbor_hub import HarborHub
from ..registry_sync_support import EXAMPLE_TASKS, SyncHarness, sync_harness

NAMES = ["collatz-steps", "hello-file", "rot13"]


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HarborHub]:
    """acme/mini: revision 1 (tag v1) with three example tasks; revision 2 (tags v2, latest) changes rot13."""
    hub = HarborHub().start()
    monkeypatch.delenv("HARBOR_API_KEY", raising=False)
    monkeypatch.setenv("REGATTA_OUTBOUND_ALLOW", "127.0.0.1")  # the stand-in hub is local
    # Harbor reads HARBOR_SUPABASE_URL at import; the running service gets it from its environment (e2e).
    monkeypatch.setattr(harbor.auth.client, "SUPABASE_URL", hub.url)
    monkeypatch.setattr(harbor.auth.client, "SUPABASE_PUBLISHABLE_KEY", "sb_publishable_standin")
    harbor.auth.client.reset_client()
    first = [hub.publish_task("acme", EXAMPLE_TASKS / name) for name in NAMES]
    hub.publish_dataset("acme", "mini", first, ["v1"], description="Three example tasks")
    changed = tmp_path / "changed" / "rot13"
    shutil.copytree(EXAMPLE_TASKS / "rot13", changed)
    (changed / "instruction.md").write_text("Changed instruction\n")
    hub.publish_dataset("acme", "mini", [*first[:2], hub.publish_task("acme", changed)], ["v2", "latest"])
    yield hub
    harbor.auth.client.reset_client()
    hub.stop()


@pytest.fixture
async def harness(tmp_path: Path, nats_url: str) -> AsyncIterator[SyncHarness]:
    async with sync_harness(f"sqlite:///{tmp_path / 'events.db'}", nats_url) as h:
        yield h


def hub_source(ref: str) -> BenchmarkSource:
    name, _, version = ref.partition("@")
    return BenchmarkSource(type="hub", ref=ref, dataset=name, version=version or None)


async def test_hub_dataset_resolves_tag_revision_digest_and_latest(
    harness: SyncHarness, hub: HarborHub
) -> None:
    v1, v2 = hub.datasets
    by_tag = await harness.first_sync(harness.add(hub_source("acme/mini@v1")))
    by_revision = await harness.first_sync(harness.add(hub_source("acme/mini@1")))
    by_digest = await harness.first_sync(harness.add(hub_source(f"acme/mini@sha256:{v1.content_hash}")))
    latest = await harness.first_sync(harness.add(hub_source("acme/mini")))

    assert by_tag["sync_status"] == "ready", by_tag.get("sync_error")
    assert by_tag["version"] == "1" and by_tag["digest"] == f"sha256:{v1.content_hash}"
    assert by_tag["metadata"]["description"] == "Three example tasks"
    assert sorted(t["name"] for t in by_tag["tasks"]) == [f"acme/{n}" for n in NAMES]
    rot13 = next(t for t in by_tag["tasks"] if t["name"] == "acme/rot13")
    assert rot13["digest"] == "sha256:" + Packager.compute_content_hash(EXAMPLE_TASKS / "rot13")[0]
    assert rot13["category"] is not None
    assert by_revision["digest"] == by_digest["digest"] == by_tag["digest"]
    assert latest["version"] == "2" and latest["digest"] == f"sha256:{v2.content_hash}"
    assert any(r.startswith("POST /rest/v1/rpc/resolve_task_version") for r in hub.requests)
    assert any(r.startswith("GET /storage/v1/object/packages/acme/rot13/") for r in hub.requests)


async def test_hub_unknown_ref_and_unknown_dataset_fail_with_the_hubs_reason(
    harness: SyncHarness, hub: HarborHub
) -> None:
    tag = await harness.first_sync(harness.add(hub_source("acme/mini@v9")))
    missing = await harness.first_sync(harness.add(hub_source("acme/nothing")))

    assert tag["sync_status"] == "failed"
    assert (
        tag["sync_error"]
        == "hub dataset acme/mini@v9: ValueError: Tag 'v9' not found for dataset 'acme/mini'"
    )
    assert missing["sync_error"] == (
        "hub dataset acme/nothing@latest: ValueError: Tag 'latest' not found for dataset 'acme/nothing'"
    )


async def test_hub_archive_that_does_not_match_its_digest_fails_the_sync(
    harness: SyncHarness, hub: HarborHub, tmp_path: Path
) -> None:
    forged = tmp_path / "forged" / "hello-file"
    shutil.copytree(EXAMPLE_TASKS / "hello-file", forged)
    task = hub.publish_task("evil", forged)
    (forged / "instruction.md").write_text("Something else entirely\n")
    # The hub serves an archive of different content under the digest it recorded for the task.
    hub.objects[task.archive_path] = _archive_of(forged)
    hub.publish_dataset("evil", "set", [task], ["latest"])

    body = await harness.first_sync(harness.add(hub_source("evil/set")))

    assert body["sync_status"] == "failed"
    assert body["sync_error"].startswith("task 'evil/hello-file': content digest sha256:")
    assert body["sync_error"].endswith(f"does not match the source's sha256:{task.content_hash}")


async def test_hub_dataset_file_regatta_toml_gives_the_benchmark_metadata(
    harness: SyncHarness, hub: HarborHub
) -> None:
    manifest = b'[benchmark]\npass_threshold = 0.5\n[task_sets]\nparity = ["acme/rot13"]\n'
    files = [hub.publish_file("acme/judged", "regatta.toml", manifest)]
    hub.publish_dataset("acme", "judged", hub.datasets[0].tasks, ["latest"], files=files)

    body = await harness.first_sync(harness.add(hub_source("acme/judged")))

    assert body["sync_status"] == "ready", body.get("sync_error")
    assert body["metadata"]["pass_threshold"] == 0.5
    assert body["metadata"]["task_sets"] == {"parity": ["acme/rot13"]}
    assert body["digest"] == f"sha256:{hub.datasets[-1].content_hash}"


def _archive_of(task_dir: Path) -> bytes:
    scratch = HarborHub()
    return scratch.objects[scratch.publish_task("evil", task_dir).archive_path]


async def test_a_hub_archive_bomb_is_refused_before_harbor_extracts_it(
    harness: SyncHarness, hub: HarborHub, tmp_path: Path
) -> None:
    # The hub serves 1 GiB of zeros (about 1 MiB compressed) as a task's archive. The sync works on an
    # 8 MiB tmpfs: had Harbor's extraction run first, it would fail with ENOSPC instead of this refusal.
    task = hub.publish_task("bomb", EXAMPLE_TASKS / "hello-file")
    files = [file_member("task.toml", b"[agent]\ntimeout_sec = 60\n"), file_member("instruction.md", b"x")]
    hub.objects[task.archive_path] = zeros_bomb(files)  # type: ignore[arg-type]
    hub.publish_dataset("bomb", "set", [task], ["latest"])

    with small_disk(tmp_path / "small") as disk:
        harness.sync.workdir = disk
        body = await harness.first_sync(harness.add(hub_source("bomb/set")))
        leftovers = [p for p in disk.rglob("*") if p.is_file()]

    assert body["sync_status"] == "failed"
    assert body["sync_error"].startswith(
        "hub dataset bomb/set@latest: task 'hub task archive': its archive of "
    ), body["sync_error"]
    assert body["sync_error"].endswith(
        "expands more than 200 times at environment/zeros.bin (REGATTA_MAX_TASK_EXPANSION)"
    )
    assert leftovers == []
