"""Issue 38 (quick iteration): a member uploads a task archive as a scratch benchmark of the workspace.
The real registry-sync syncs it from the task archive bucket like any other source, its runs never
rank; a hostile archive (a path out of the folder, a link, too large, too many files, a bomb, a bad
task.toml) is refused naming the entry or field and the bound, and nothing is stored or recorded."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
from fastapi.testclient import TestClient
from nats.js.errors import NotFoundError
from regatta_gateway.app import create_app
from regatta_registry_sync.archive_store import NatsArchiveStore
from regatta_registry_sync.sync import BenchmarkSync, initial_sync_id
from regatta_shared.bus import TASKS_BUCKET
from regatta_shared.ceilings import TaskFileBounds
from regatta_shared.conditions import SCRATCH_REASON, qualification
from regatta_shared.ids import run_stream
from regatta_shared.task_uploads import upload_key

from ..registry_sync_support import write_task
from .conftest import Gateway, demo_config, make_settings

GZIP = {"Content-Type": "application/gzip"}
MAX_FILES = 40


@pytest.fixture
def small_gateway(nats_url: str, tmp_path: Path) -> Iterator[Gateway]:
    """The gateway with a 1 MiB and 40-file task bound, so hostile archives stay small."""
    settings = make_settings(f"sqlite:///{tmp_path / 'events.db'}", nats_url, tmp_path / "data")
    settings = settings.model_copy(update={"max_task_mb": 1, "max_task_files": MAX_FILES})
    with TestClient(create_app(settings)) as client:
        yield Gateway(client, settings)


def pack(folder: Path, top: str | None = None) -> bytes:
    """The tar.gz `tar czf - -C folder.parent folder.name` would make (links kept as links)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        archive.add(folder, arcname=top or folder.name)
    return buffer.getvalue()


def crafted(*entries: tuple[str, bytes | None, bytes | str]) -> bytes:
    """A tar.gz of (name, tar type, data or link target) entries, exactly as given."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, kind, data in entries:
            member = tarfile.TarInfo(name)
            member.type = kind or tarfile.REGTYPE
            if isinstance(data, str):
                member.linkname = data
                archive.addfile(member)
            else:
                member.size = len(data)
                member.mode = 0o644
                archive.addfile(member, io.BytesIO(data))
    return buffer.getvalue()


def good_task_entries(prefix: str = "t") -> list[tuple[str, bytes | None, bytes | str]]:
    return [
        (f"{prefix}/task.toml", None, b"[verifier]\ntimeout_sec = 60\n"),
        (f"{prefix}/instruction.md", None, b"Write 1 to /app/out.txt\n"),
        (f"{prefix}/environment/Dockerfile", None, b"FROM debian:bookworm-slim\n"),
        (f"{prefix}/tests/test.sh", None, b"#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n"),
    ]


async def _in_bucket(nats_url: str, key: str) -> bool:
    nc = await nats.connect(nats_url)
    try:
        bucket = await nc.jetstream().object_store(TASKS_BUCKET)
        try:
            await bucket.get_info(key)
        except NotFoundError:
            return False
        return True
    finally:
        await nc.close()


async def _sync(gw: Gateway, benchmark_id: str) -> None:
    nc = await nats.connect(gw.nats_url)
    try:
        bucket = await nc.jetstream().object_store(TASKS_BUCKET)
        sync = BenchmarkSync(
            gw.store, NatsArchiveStore(bucket), bounds=TaskFileBounds.from_settings(gw.settings)
        )
        await sync.run(benchmark_id, initial_sync_id(benchmark_id))
    finally:
        await nc.close()
    gw.settle()


async def test_a_member_uploads_a_task_folder_which_syncs_runs_and_never_ranks(
    gateway: Gateway, tmp_path: Path
) -> None:
    gw = gateway
    member = gw.member("default", "mia@example.com")
    for index, name in enumerate(("alpha", "beta")):
        write_task(tmp_path / "mine" / name, index)
    archive = pack(tmp_path / "mine")

    created = gw.ok(gw.v1("POST", "/benchmarks/uploads", content=archive, headers=GZIP, token=member), 201)
    assert (created["name"], created["tasks"], created["existing"]) == ("mine", ["alpha", "beta"], False)
    key = upload_key(hashlib.sha256(archive).hexdigest())
    assert await _in_bucket(gw.nats_url, key)
    await _sync(gw, created["id"])
    detail = gw.ok(gw.v1("GET", f"/benchmarks/{created['id']}", token=member))["benchmark"]
    assert (detail["sync_status"], detail["source_type"], detail["task_count"]) == ("ready", "upload", 2)
    for task in detail["tasks"]:
        # Each task's own archive, as registry-sync builds it for every source: what executors fetch.
        assert await _in_bucket(gw.nats_url, task["digest"]), task

    # The same archive again is the benchmark it made; another workspace does not see it.
    again = gw.v1("POST", "/benchmarks/uploads", content=archive, headers=GZIP, token=member)
    assert gw.ok(again, 201)["id"] == created["id"] and again.json()["existing"] is True
    gw.workspace("elsewhere")
    assert gw.v1("GET", f"/benchmarks/{created['id']}", workspace="elsewhere").status_code == 404

    run = gw.ok(gw.v1("POST", "/runs", json=demo_config(created["id"]), token=member), 201)
    [submitted] = [e for e in gw.store.read_stream(run_stream(run["id"])) if e.type == "RunSubmitted"]
    assert submitted.data["scratch"] is True
    judged = qualification(submitted.data)
    assert not judged["qualifies"] and SCRATCH_REASON in judged["reasons"]

    # Only the upload route makes an upload source: a body naming one is refused.
    named = gw.v1("POST", "/benchmarks", json={"source_type": "upload", "source_ref": key}, token=member)
    assert named.status_code == 400 and named.json()["field"] == "source_type", named.text


async def test_one_task_at_the_archive_top_is_named_by_the_name_given(gateway: Gateway) -> None:
    gw = gateway
    loose = crafted(*[(name.removeprefix("t/"), kind, data) for name, kind, data in good_task_entries()])
    created = gw.ok(
        gw.v1("POST", "/benchmarks/uploads", params={"name": "quick"}, content=loose, headers=GZIP), 201
    )
    assert (created["name"], created["tasks"]) == ("quick", ["quick"])
    await _sync(gw, created["id"])
    detail = gw.ok(gw.v1("GET", f"/benchmarks/{created['id']}"))["benchmark"]
    assert [t["name"] for t in detail["tasks"]] == ["quick"] and detail["sync_status"] == "ready"


def _many_files() -> bytes:
    return crafted(*good_task_entries(), *[(f"t/tests/f{i}.txt", None, b"x") for i in range(MAX_FILES)])


def _too_large() -> bytes:
    # Random bytes do not compress: the archive itself passes 1 MiB.
    return crafted(*good_task_entries(), ("t/environment/blob.bin", None, os.urandom(1_200_000)))


def _bomb() -> bytes:
    # A few KB compressed, past the 1 MiB bound unpacked: refused while it is counted, never written.
    return crafted(*good_task_entries(), ("t/environment/zeros.bin", None, bytes(1_200_000)))


HOSTILE = {
    "path out of the folder": (
        lambda: crafted(*good_task_entries(), ("t/../../escape.txt", None, b"x")),
        "t/../../escape.txt",
        "outside the destination",
    ),
    "absolute path": (
        lambda: crafted(*good_task_entries(), ("/etc/cron.d/evil", None, b"x")),
        "/etc/cron.d/evil",
        "is an absolute path",
    ),
    "symlink out": (
        lambda: crafted(*good_task_entries(), ("t/tests/passwd", tarfile.SYMTYPE, "/etc/passwd")),
        "t/tests/passwd",
        "archive entry refused",
    ),
    "symlink inside": (
        lambda: crafted(*good_task_entries(), ("t/tests/again.sh", tarfile.SYMTYPE, "test.sh")),
        "t/tests/again.sh",
        "is not a file or a folder (a link to 'test.sh')",
    ),
    "hard link": (
        lambda: crafted(*good_task_entries(), ("t/tests/hard", tarfile.LNKTYPE, "t/tests/test.sh")),
        "t/tests/hard",
        "is not a file or a folder",
    ),
    "too many files": (_many_files, "archive", f"more than {MAX_FILES} entries (REGATTA_MAX_TASK_FILES)"),
    "too large": (_too_large, "archive", "larger than 1 MiB (REGATTA_MAX_TASK_MB)"),
    "zip bomb": (_bomb, "t/environment/zeros.bin", "unpacking passes 1 MiB at t/environment/zeros.bin"),
    "task.toml not TOML": (
        lambda: crafted(("t/task.toml", None, b"[agent\ntimeout_sec = 1\n"), *good_task_entries()[1:]),
        "t/task.toml",
        "is not valid TOML",
    ),
    "task.toml wrong value": (
        lambda: crafted(("t/task.toml", None, b'[agent]\ntimeout_sec = "soon"\n'), *good_task_entries()[1:]),
        "t/task.toml:agent.timeout_sec",
        "t/task.toml: agent.timeout_sec:",
    ),
    "no task in it": (lambda: crafted(("docs/readme.txt", None, b"hello")), "archive", "no task in it"),
    "empty archive": (crafted, "archive", "no task in it"),
    "not gzip": (lambda: b"PK\x03\x04 a zip file, not a tar.gz", "archive", "cannot be unpacked"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
async def test_a_hostile_upload_is_refused_naming_what_and_nothing_is_stored(
    small_gateway: Gateway, case: str
) -> None:
    gw = small_gateway
    make, field, said = HOSTILE[case]
    archive = make()
    before = gw.event_count()
    refused = gw.v1("POST", "/benchmarks/uploads", content=archive, headers=GZIP)
    assert refused.status_code in (400, 413), refused.text
    body = refused.json()
    assert body["field"] == field and said in body["message"], body
    assert gw.event_count() == before
    assert not await _in_bucket(gw.nats_url, upload_key(hashlib.sha256(archive).hexdigest()))
    assert gw.ok(gw.v1("GET", "/benchmarks"))["benchmarks"] == []


def test_an_upload_in_another_media_type_or_over_the_declared_size_is_refused_unread(
    small_gateway: Gateway,
) -> None:
    gw = small_gateway
    before = gw.event_count()
    as_json = gw.v1("POST", "/benchmarks/uploads", json={"archive": "x"})
    assert as_json.status_code == 415 and as_json.json()["field"] == "Content-Type", as_json.text
    declared = gw.v1(
        "POST",
        "/benchmarks/uploads",
        content=b"x",
        headers={**GZIP, "Content-Length": str(2 << 20)},
    )
    assert declared.status_code == 413 and declared.json()["field"] == "archive", declared.text
    assert "larger than 1 MiB (REGATTA_MAX_TASK_MB)" in declared.json()["message"]
    # Streamed without a length: refused as the chunks pass the bound.
    archive = _too_large()
    chunks = (archive[i : i + 65536] for i in range(0, len(archive), 65536))
    streamed = gw.v1("POST", "/benchmarks/uploads", content=chunks, headers=GZIP)
    assert streamed.status_code == 413, streamed.text
    said = streamed.json()
    assert said["field"] == "archive" and "1 MiB (REGATTA_MAX_TASK_MB)" in said["message"], said
    bad_name = gw.v1("POST", "/benchmarks/uploads", params={"name": "a" * 300}, content=b"x", headers=GZIP)
    assert bad_name.status_code in (400, 422), bad_name.text
    assert gw.event_count() == before
