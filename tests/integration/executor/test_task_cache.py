"""Issue 27 finding 8 in the executor: the task cache unpacks archives from the real NATS object store with
entries, bytes and expansion bounded while it streams (a bomb handed to it directly is refused, naming the
file or the count, before anything is written), and is pruned by size, least recently used first, never
a task in use. Also the executor's own ceilings check (defence in depth: refused, never clamped)."""

from __future__ import annotations

import io
import os
import tarfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
from regatta_executor.tasks.cache import TaskArchiveRefused, TaskCache
from regatta_executor.tasks.ceilings import check_ceilings
from regatta_executor.tasks.environment import TaskEnvironmentError
from regatta_shared.rules.ceilings import Ceilings, TaskFileBounds
from regatta_shared.settings import Settings

from ..archive_support import archive, file_member, small_disk, zeros_bomb
from ..registry_sync_support import write_task

pytestmark = pytest.mark.timeout(300)
MIB = 1024 * 1024
BOUNDS = TaskFileBounds(max_bytes=512 * MIB, max_files=10_000, max_expansion=200)


def _file(name: str, data: bytes) -> tuple[tarfile.TarInfo, io.BytesIO]:
    return file_member(name, data)


def _archive(members: list, level: int = 6) -> bytes:
    return archive(members, level)


def _task_files(text: str = "hello") -> list:
    return [_file("task.toml", b"[agent]\ntimeout_sec = 60\n"), _file("instruction.md", text.encode())]


@pytest.fixture(scope="module")
def bomb() -> bytes:
    return zeros_bomb(_task_files())


@pytest.fixture(scope="module")
def many_files() -> bytes:
    members = []
    for index in range(100_000):
        member = tarfile.TarInfo(f"tests/data/{index:06d}")
        members.append((member, io.BytesIO(b"")))
    return _archive([*_task_files(), *members])  # type: ignore[list-item]


@pytest.fixture
async def bucket(nats_url: str) -> AsyncIterator[object]:
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    name = f"test-task-cache-{uuid.uuid4().hex[:8]}"
    try:
        yield await js.create_object_store(name)
    finally:
        await js.delete_object_store(name)
        await nc.close()


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with small_disk(tmp_path / "small") as mount:
        yield mount


async def _put(bucket: object, data: bytes) -> str:
    digest = f"sha256:{uuid.uuid4().hex}"
    await bucket.put(digest, data)  # type: ignore[attr-defined]
    return digest


def _files_under(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and not p.name.startswith(".")]


async def test_a_1_gib_file_of_zeros_is_refused_by_name_before_anything_is_written(
    bucket: object, bomb: bytes, disk: Path
) -> None:
    assert len(bomb) < 2 * MIB  # deflate's best is about 1:1000
    cache = TaskCache(disk / "cache", bucket, BOUNDS, 1024 * MIB)  # type: ignore[arg-type]
    digest = await _put(bucket, bomb)

    with pytest.raises(TaskArchiveRefused) as refused:
        async with cache.use(digest, "bomb"):
            pytest.fail("the bomb was unpacked")

    assert str(refused.value).startswith(
        f"task 'bomb': its archive of {len(bomb)} bytes expands more than 200 times at "
        "environment/zeros.bin (REGATTA_MAX_TASK_EXPANSION)"
    )
    assert _files_under(disk / "cache") == []


async def test_the_size_bound_holds_where_the_ratio_does_not(bucket: object, tmp_path: Path) -> None:
    # Random bytes do not compress: 3 MiB over a 2 MiB bound, refused at the file that passes it.
    bounds = TaskFileBounds(max_bytes=2 * MIB, max_files=100, max_expansion=200)
    data = _archive([*_task_files(), _file("environment/data.bin", os.urandom(3 * MIB))])
    cache = TaskCache(tmp_path / "cache", bucket, bounds, 1024 * MIB)  # type: ignore[arg-type]

    with pytest.raises(TaskArchiveRefused, match=r"unpacking passes 2 MiB at environment/data.bin"):
        async with cache.use(await _put(bucket, data), "big"):
            pass
    assert _files_under(tmp_path / "cache") == []


async def test_100k_tiny_files_are_refused_by_count(bucket: object, many_files: bytes, disk: Path) -> None:
    # The disk has 2,000 inodes: the refusal comes before any of 100,000 files is created.
    cache = TaskCache(disk / "cache", bucket, BOUNDS, 1024 * MIB)  # type: ignore[arg-type]

    with pytest.raises(TaskArchiveRefused) as refused:
        async with cache.use(await _put(bucket, many_files), "many"):
            pass

    assert str(refused.value) == (
        "task 'many': its archive has more than 10000 entries (REGATTA_MAX_TASK_FILES)"
    )
    assert _files_under(disk / "cache") == []


@pytest.mark.parametrize(
    ("member", "reason"),
    [
        (("../escape.txt", tarfile.REGTYPE, ""), "archive entry refused"),
        (("tests/link", tarfile.SYMTYPE, "/etc/passwd"), "archive entry refused"),
        (("tests/inner", tarfile.SYMTYPE, "data.txt"), "is not a file or a folder"),
        (("tests/fifo", tarfile.FIFOTYPE, ""), "archive entry refused"),
        (("tests/hard", tarfile.LNKTYPE, "task.toml"), "is not a file or a folder"),
    ],
    ids=["dot-dot", "link-out", "link-in", "fifo", "hardlink"],
)
async def test_entries_no_task_archive_holds_are_refused(
    bucket: object, tmp_path: Path, member: tuple[str, bytes, str], reason: str
) -> None:
    name, kind, link = member
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    data = _archive([*_task_files(), (info, None)])
    cache = TaskCache(tmp_path / "cache", bucket, BOUNDS, 1024 * MIB)  # type: ignore[arg-type]

    with pytest.raises(TaskArchiveRefused, match=reason):
        async with cache.use(await _put(bucket, data), "hostile"):
            pass
    assert not (tmp_path / "escape.txt").exists()
    assert _files_under(tmp_path / "cache") == []


async def test_the_cache_is_pruned_least_recently_used_first_never_a_task_in_use(
    bucket: object, tmp_path: Path
) -> None:
    # Four tasks of about 1 MiB each (random bytes: no ratio bound) in a 2.5 MiB cache.
    digests = []
    for index in range(4):
        files = [*_task_files(f"task {index}"), _file("environment/data.bin", os.urandom(MIB))]
        digests.append(await _put(bucket, _archive(files)))
    cache = TaskCache(tmp_path / "cache", bucket, BOUNDS, int(2.5 * MIB))  # type: ignore[arg-type]
    folder = {d: tmp_path / "cache" / d.replace(":", "_") for d in digests}

    async with cache.use(digests[0], "t0") as held:
        assert (held / "instruction.md").read_text() == "task 0"
        async with cache.use(digests[1], "t1"):
            pass
        time.sleep(0.01)  # distinct last-use times on coarse clocks
        async with cache.use(digests[2], "t2"):
            pass
        # Three tasks in 2.5 MiB: t1, the least recently used not in use, went; t0 is held.
        assert [d for d in digests[:3] if folder[d].exists()] == [digests[0], digests[2]]
        time.sleep(0.01)
        async with cache.use(digests[3], "t3") as newest:
            assert (newest / "instruction.md").read_text() == "task 3"
        # t0 is still in use, so t2 went, although t0 was used longer ago.
        assert (held / "instruction.md").read_text() == "task 0"
        assert [d for d in digests if folder[d].exists()] == [digests[0], digests[3]]
    # A task that was pruned is fetched and unpacked again when it is needed.
    async with cache.use(digests[1], "t1") as again:
        assert (again / "instruction.md").read_text() == "task 1"


def _ceilings(**env: str) -> Ceilings:
    return Ceilings.from_settings(Settings(**env))  # type: ignore[arg-type]


def test_the_executor_refuses_a_task_over_the_ceilings_instead_of_clamping(tmp_path: Path) -> None:
    task = tmp_path / "task"
    write_task(task, 1)
    toml = task / "task.toml"
    toml.write_text(toml.read_text() + "[environment]\nmemory_mb = 1048576\n")
    ceilings = _ceilings(REGATTA_MAX_MEMORY_MB="16384", REGATTA_MAX_AGENT_TIMEOUT_SEC="600")

    with pytest.raises(TaskEnvironmentError) as refused:
        check_ceilings(ceilings, task, 1.0)
    assert str(refused.value) == (
        "refused by this executor: [environment].memory_mb = 1048576 exceeds the operator's ceiling of "
        "16384 (REGATTA_MAX_MEMORY_MB)"
    )

    # A run's timeout multiplier counts: 60 s x 20 is over a 600 s ceiling.
    toml.write_text(toml.read_text().replace("memory_mb = 1048576", "memory_mb = 2048"))
    check_ceilings(ceilings, task, 1.0)
    with pytest.raises(TaskEnvironmentError, match=r"\[agent\].timeout_sec = 60 \(x20 timeout multiplier\)"):
        check_ceilings(ceilings, task, 20.0)
    # The environment's process limit (the operator's kwargs) is held to REGATTA_MAX_PROCESSES too.
    with pytest.raises(
        TaskEnvironmentError, match=r"max_processes = 100000 exceeds .* \(REGATTA_MAX_PROCESSES\)"
    ):
        check_ceilings(ceilings, task, 1.0, 100_000)
