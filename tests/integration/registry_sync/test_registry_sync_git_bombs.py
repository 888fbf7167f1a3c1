"""Issue 27 finding 8 for git sources: a task of a git repository is measured from git's own objects
before Harbor checks it out, so a 1 GiB file of zeros (a few MB in a pack), 100,000 tiny files, or links
Harbor would copy as folders are refused by name and never expanded; the dataset's other tasks sync.

The repositories are served over https by `git http-backend` on 127.0.0.1 (partial clone enabled, as
on GitHub), allow-listed for the outbound guard. The sync works on an 8 MiB tmpfs of 2,000 inodes, which
is also Harbor's temp folder: had anything been checked out in full, it would fail with ENOSPC instead
of listing the task invalid. Real registry-sync, event store, NATS object store and the gateway's
projection."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
import zlib
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from regatta_shared.events import BenchmarkSource

from regatta import nats_server

from ..archive_support import small_disk
from ..registry_sync_support import (
    SyncHarness,
    commit_all,
    git,
    git_https_server,
    init_repo,
    sync_harness,
    write_task,
)

pytestmark = pytest.mark.timeout(600)
MIB = 1024 * 1024
GIB = 1024 * MIB


@pytest.fixture
async def harness(
    tmp_path: Path, nats_url: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[SyncHarness]:
    # The bounds the messages name, whatever this machine's settings.
    monkeypatch.setenv("REGATTA_MAX_TASK_MB", "512")
    monkeypatch.setenv("REGATTA_MAX_TASK_FILES", "10000")
    async with sync_harness(f"sqlite:///{tmp_path / 'events.db'}", nats_url) as h:
        yield h


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("GIT_SSL_CAINFO", str(tmp_path / "certs" / "cert.pem"))
    monkeypatch.setenv("REGATTA_OUTBOUND_ALLOW", "127.0.0.1")
    with git_https_server(tmp_path / "served", nats_server.free_port(), tmp_path / "certs") as url:
        yield url


@contextmanager
def on_small_disk(harness: SyncHarness, folder: Path, size: str = "8m") -> Iterator[Path]:
    """The sync's working folder and Harbor's temp folder (its clones) on a small tmpfs."""
    with small_disk(folder, size) as disk, pytest.MonkeyPatch.context() as patch:
        harness.sync.workdir = disk
        patch.setattr(tempfile, "tempdir", str(disk))
        yield disk


def served_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "served" / "bench"
    init_repo(repo)
    # Partial clone, as GitHub serves it: without it a clone carries every blob.
    git(repo, "config", "uploadpack.allowFilter", "true")
    write_task(repo / "tasks" / "ok", 1)
    return repo


def zeros_blob(repo: Path, size: int) -> str:
    """A loose blob of `size` zero bytes, written compressed (never `size` bytes on disk)."""
    header = f"blob {size}\0".encode()
    digest = hashlib.sha1(header)
    packer = zlib.compressobj(1)
    chunk = bytes(MIB)
    scratch = repo / ".git" / "objects" / "zeros.tmp"
    with scratch.open("wb") as out:
        out.write(packer.compress(header))
        for _ in range(size // MIB):
            digest.update(chunk)
            out.write(packer.compress(chunk))
        out.write(packer.flush())
    oid = digest.hexdigest()
    target = repo / ".git" / "objects" / oid[:2] / oid[2:]
    target.parent.mkdir(exist_ok=True)
    scratch.rename(target)
    return oid


def commit_index(repo: Path, message: str) -> str:
    """Commit what the index holds (entries grafted into it have no file in the working tree)."""
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def git_source(url: str) -> BenchmarkSource:
    return BenchmarkSource(type="git", ref=url, git_url=url)


def invalid(body: dict) -> dict[str, str]:
    return {task["name"]: task["invalid_reason"] for task in body["tasks"] if task["invalid_reason"]}


def files_under(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()]


async def test_a_1_gib_file_of_zeros_and_links_harbor_would_copy_are_refused_unexpanded(
    harness: SyncHarness, served: str, tmp_path: Path
) -> None:
    repo = served_repo(tmp_path)
    write_task(repo / "tasks" / "zeros", 2)
    # Links Harbor replaces by what they name: each level's folder is the previous one twice, so
    # 16 MiB at the bottom become 1 GiB at d06 (and 2 GiB for the task) once copied.
    write_task(repo / "tasks" / "links", 3)
    levels = repo / "tasks" / "links" / "environment"
    (levels / "d00").mkdir()
    with (levels / "d00" / "blob").open("wb") as handle:
        handle.truncate(16 * MIB)
    for level in range(1, 7):
        folder = levels / f"d{level:02d}"
        folder.mkdir()
        for name in ("a", "b"):
            (folder / name).symlink_to(f"../d{level - 1:02d}")
    git(repo, "add", "-A")
    oid = zeros_blob(repo, GIB)
    git(repo, "update-index", "--add", "--cacheinfo", f"100644,{oid},tasks/zeros/environment/zeros.bin")
    commit = commit_index(repo, "bombs")

    with on_small_disk(harness, tmp_path / "small") as disk:
        body = await harness.first_sync(harness.add(git_source(f"{served}/bench")))
        left = files_under(disk)

    assert body["sync_status"] == "ready", body.get("sync_error")
    assert body["source_commit"] == commit
    assert [t["name"] for t in body["tasks"] if not t["invalid_reason"]] == ["ok"]
    assert invalid(body) == {
        "zeros": "task 'zeros': its files pass 512 MiB at environment/zeros.bin (1.0 GiB) "
        "(REGATTA_MAX_TASK_MB)",
        "links": "task 'links': its files pass 512 MiB at environment/d05/a/a/a/a/a/blob (16.0 MiB) "
        "(REGATTA_MAX_TASK_MB)",
    }
    ok = await harness.archive_files(body["tasks"][[t["name"] for t in body["tasks"]].index("ok")]["digest"])
    assert b"grep -qx 1" in ok["tests/test.sh"]
    assert left == [], "the sync left files behind"


async def test_100k_tiny_files_are_refused_by_count_from_the_trees_alone(
    harness: SyncHarness, served: str, tmp_path: Path
) -> None:
    repo = served_repo(tmp_path)
    write_task(repo / "tasks" / "many", 2)
    git(repo, "add", "-A")
    empty = _git_input(repo, "", "hash-object", "-w", "--stdin")
    listing = "".join(f"100644 blob {empty}\t{index:06d}\n" for index in range(100_000))
    tree = _git_input(repo, listing, "mktree")
    git(repo, "read-tree", "--prefix=tasks/many/tests/data/", tree)
    commit_index(repo, "many files")

    # 2,000 inodes: checked out, the task would need 100,000. The space is for the index Harbor's
    # sparse checkout keeps (one line per path of the commit, checked out or not).
    with on_small_disk(harness, tmp_path / "small", "64m") as disk:
        body = await harness.first_sync(harness.add(git_source(f"{served}/bench")))
        left = files_under(disk)

    assert body["sync_status"] == "ready", body.get("sync_error")
    assert [t["name"] for t in body["tasks"] if not t["invalid_reason"]] == ["ok"]
    assert invalid(body) == {
        "many": "task 'many': more than 10000 files and folders (REGATTA_MAX_TASK_FILES)"
    }
    assert left == []


async def test_incompressible_files_past_the_bound_are_stopped_while_fetched(
    harness: SyncHarness, served: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bound git's object headers cannot help with: 40 MiB of random bytes under a 4 MiB bound. The
    fetch of the task's blobs stops past the bound and its slack; nothing of it stays."""
    harness.sync.bounds = type(harness.sync.bounds)(4 * MIB, 10_000, 200.0)
    repo = served_repo(tmp_path)
    write_task(repo / "tasks" / "noise", 2)
    (repo / "tasks" / "noise" / "environment" / "noise.bin").write_bytes(os.urandom(40 * MIB))
    commit_all(repo, "noise")
    workdir = tmp_path / "work"
    harness.sync.workdir = workdir

    body = await harness.first_sync(harness.add(git_source(f"{served}/bench")))

    assert body["sync_status"] == "ready", body.get("sync_error")
    assert [t["name"] for t in body["tasks"] if not t["invalid_reason"]] == ["ok"]
    assert invalid(body) == {
        "noise": "task 'noise': its files pass 4 MiB while fetched (REGATTA_MAX_TASK_MB)"
    }
    assert files_under(workdir) == []


async def test_a_registry_json_in_the_repository_is_held_to_the_source_policy(
    harness: SyncHarness, served: str, tmp_path: Path
) -> None:
    """Its git URLs are the repository author's: an internal address is refused like a user's, and a
    task path Harbor's sparse checkout would read as a pattern is refused before any checkout."""
    repo = served_repo(tmp_path)
    entries = [
        {"name": "ok", "path": "tasks/ok"},
        {"name": "inside", "path": "tasks/inside", "git_url": "https://10.1.2.3/internal.git"},
    ]
    (repo / "registry.json").write_text(
        json.dumps([{"name": "cat", "version": "1.0", "description": "", "tasks": entries}])
    )
    commit_all(repo, "registry")

    internal = await harness.first_sync(
        harness.add(git_source(f"{served}/bench").model_copy(update={"dataset": "cat"}))
    )

    assert internal["sync_status"] == "failed"
    assert internal["sync_error"] == (
        "could not fetch task 'inside'.git_url: address not allowed unless REGATTA_OUTBOUND_ALLOW names it"
    )

    # Harbor names a task of a repository's registry.json after its folder.
    entries[1:] = [{"name": "star", "path": "tasks/*"}]
    (repo / "registry.json").write_text(
        json.dumps([{"name": "cat", "version": "1.0", "description": "", "tasks": entries}])
    )
    commit_all(repo, "pattern")
    body = await harness.first_sync(
        harness.add(git_source(f"{served}/bench").model_copy(update={"dataset": "cat"}), "b2")
    )
    assert body["sync_status"] == "ready", body.get("sync_error")
    assert invalid(body) == {
        "*": "task '*': its path 'tasks/*' has characters Harbor's sparse checkout reads as a "
        "pattern (* ? [ \\ ! # or spaces)"
    }

    # A path without a slash is a pattern matching that name at any depth: docs/alpha would be
    # checked out too, unmeasured.
    write_task(repo / "alpha", 4)
    (repo / "docs" / "alpha").mkdir(parents=True)
    (repo / "docs" / "alpha" / "notes.txt").write_text("not the task\n")
    entries[1:] = [{"name": "alpha", "path": "alpha"}]
    (repo / "registry.json").write_text(
        json.dumps([{"name": "cat", "version": "1.0", "description": "", "tasks": entries}])
    )
    commit_all(repo, "unanchored")
    body = await harness.first_sync(
        harness.add(git_source(f"{served}/bench").model_copy(update={"dataset": "cat"}), "b3")
    )
    assert body["sync_status"] == "ready", body.get("sync_error")
    assert invalid(body) == {
        "alpha": "task 'alpha': its path 'alpha' also matches docs/alpha, which Harbor's sparse checkout "
        "would check out too"
    }


def _git_input(repo: Path, text: str, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], input=text, check=True, capture_output=True, text=True
    ).stdout.strip()


async def test_a_registry_json_harbor_would_check_out_is_bounded_wherever_it_lies(
    harness: SyncHarness, served: str, tmp_path: Path
) -> None:
    """Harbor checks registry.json out with the pattern `registry.json`, which matches that name at any
    depth: 40 MiB of zeros at docs/registry.json would be written too. The sync fails before that."""
    repo = served_repo(tmp_path)
    entries = [{"name": "ok", "path": "tasks/ok"}]
    (repo / "registry.json").write_text(
        json.dumps([{"name": "cat", "version": "1.0", "description": "", "tasks": entries}])
    )
    git(repo, "add", "-A")
    oid = zeros_blob(repo, 40 * MIB)
    git(repo, "update-index", "--add", "--cacheinfo", f"100644,{oid},docs/registry.json")
    commit = commit_index(repo, "nested registry.json")
    source = git_source(f"{served}/bench").model_copy(update={"dataset": "cat"})

    body = await harness.first_sync(harness.add(source))

    assert body["sync_status"] == "failed"
    assert body["sync_error"] == (
        f"git repository {served}/bench at {commit[:12]}: registry.json: the files it matches pass "
        "32 MiB (40.0 MiB)"
    )
    assert not harness.events(body["id"], "BenchmarkTasksSynced")
