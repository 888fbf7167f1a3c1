"""Git sources: a repository pinned to a commit (local path, and an https remote served by
`git http-backend` from a tmp dir), registry.json inside a repository, and registry tasks with git_url +
git_commit_id."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from regatta_shared.events import BenchmarkSource

from regatta import nats_server

from ..registry_sync_support import (
    SyncHarness,
    commit_all,
    git,
    git_https_server,
    init_repo,
    registry_source,
    sync_harness,
    write_task,
)


@pytest.fixture
async def harness(database_url: str, nats_url: str) -> AsyncIterator[SyncHarness]:
    async with sync_harness(database_url, nats_url) as h:
        yield h


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, str, str]:
    """Two commits: the first has tasks alpha and beta; the second changes alpha's test and adds gamma."""
    repo = tmp_path / "served" / "bench"
    init_repo(repo)
    write_task(repo / "tasks" / "alpha", 1, "math")
    write_task(repo / "tasks" / "beta", 2, "text")
    (repo / "README.md").write_text("not a task\n")
    first = commit_all(repo, "first")
    git(repo, "tag", "-a", "v1", "-m", "first release")
    (repo / "tasks" / "alpha" / "tests" / "test.sh").write_text(
        "#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n"
    )
    write_task(repo / "tasks" / "gamma", 3, "files")
    second = commit_all(repo, "second")
    return repo, first, second


@pytest.fixture
def daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The repositories under tmp/served over https on 127.0.0.1, allow-listed for the outbound guard."""
    monkeypatch.setenv("GIT_SSL_CAINFO", str(tmp_path / "certs" / "cert.pem"))
    monkeypatch.setenv("REGATTA_OUTBOUND_ALLOW", "127.0.0.1")
    with git_https_server(tmp_path / "served", nats_server.free_port(), tmp_path / "certs") as url:
        yield url


def git_source(url: str, ref: str | None = None, **extra: object) -> BenchmarkSource:
    return BenchmarkSource(type="git", ref=f"{url}@{ref}" if ref else url, git_url=url, git_ref=ref, **extra)


async def test_local_repository_pinned_to_the_first_commit_syncs_that_commit(
    harness: SyncHarness, repo: tuple[Path, str, str]
) -> None:
    path, first, second = repo
    pinned = harness.add(git_source(str(path), first[:10]))
    head = harness.add(git_source(str(path)))

    old = await harness.first_sync(pinned)
    new = await harness.first_sync(head)

    assert old["sync_status"] == "ready", old.get("sync_error")
    assert old["source_commit"] == first and old["version"] == first[:12]
    assert [t["name"] for t in old["tasks"]] == ["alpha", "beta"]
    alpha = await harness.archive_files(old["tasks"][0]["digest"])
    assert b"grep -qx 1" in alpha["tests/test.sh"]
    assert new["source_commit"] == second and [t["name"] for t in new["tasks"]] == ["alpha", "beta", "gamma"]
    assert new["tasks"][0]["digest"] != old["tasks"][0]["digest"]
    assert b"echo 0" in (await harness.archive_files(new["tasks"][0]["digest"]))["tests/test.sh"]


async def test_remote_repository_resolves_an_annotated_tag_to_its_commit(
    harness: SyncHarness, repo: tuple[Path, str, str], daemon: str
) -> None:
    _path, first, second = repo
    by_tag = harness.add(git_source(f"{daemon}/bench", "v1"))
    by_branch = harness.add(git_source(f"{daemon}/bench", "main"))

    tagged = await harness.first_sync(by_tag)
    branch = await harness.first_sync(by_branch)

    assert tagged["sync_status"] == "ready", tagged.get("sync_error")
    assert tagged["source_commit"] == first and tagged["task_count"] == 2
    assert branch["source_commit"] == second and branch["task_count"] == 3


async def test_repository_with_registry_json_and_manifest_at_its_root(
    harness: SyncHarness, tmp_path: Path
) -> None:
    repo = tmp_path / "catalogue"
    init_repo(repo)
    for index, name in enumerate(["one", "two", "three"]):
        write_task(repo / "bench" / name, index)
    entries = [{"name": n, "path": f"bench/{n}"} for n in ("one", "two", "three")]
    (repo / "registry.json").write_text(
        json.dumps(
            [
                {"name": "cat", "version": "1.0", "description": "old", "tasks": entries[:1]},
                {"name": "cat", "version": "2.0", "description": "Catalogue", "tasks": entries},
            ]
        )
    )
    (repo / "regatta.toml").write_text('[task_sets.parity]\ntasks = ["t*"]\nrecommended = true\n')
    commit = commit_all(repo, "catalogue")
    benchmark_id = harness.add(git_source(str(repo), "main", dataset="cat"))

    body = await harness.first_sync(benchmark_id)

    assert body["sync_status"] == "ready", body.get("sync_error")
    assert body["version"] == "2.0" and body["source_commit"] == commit and body["task_count"] == 3
    assert body["metadata"]["description"] == "Catalogue"
    assert body["metadata"]["task_sets"] == {"parity": ["two", "three"]}
    assert body["metadata"]["recommended_task_set"] == "parity"


async def test_registry_tasks_with_git_url_and_commit_are_fetched_at_that_commit(
    harness: SyncHarness, repo: tuple[Path, str, str], tmp_path: Path
) -> None:
    path, first, _second = repo
    registry = tmp_path / "registry.json"
    tasks = [
        {"name": name, "git_url": f"file://{path}", "git_commit_id": first, "path": f"tasks/{name}"}
        for name in ("alpha", "beta")
    ]
    registry.write_text(json.dumps([{"name": "remote", "version": "1.0", "description": "", "tasks": tasks}]))
    benchmark_id = harness.add(registry_source(registry, "remote@1.0"))

    body = await harness.first_sync(benchmark_id)

    assert body["sync_status"] == "ready", body.get("sync_error")
    alpha = await harness.archive_files(body["tasks"][0]["digest"])
    assert b"grep -qx 1" in alpha["tests/test.sh"]
