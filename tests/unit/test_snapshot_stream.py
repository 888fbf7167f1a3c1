"""snapshots.SnapshotStream: the output of the exec that ends the agent's turn (the digest's line, then a tar
of /logs) split as the engine streams it, in chunks that fall anywhere."""

from __future__ import annotations

import io
import tarfile

from regatta_executor.container.files.snapshots import SnapshotStream

LINE = b"regatta-listing-sha256 " + b"ab" * 32 + b"\n"


def logs_archive() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name in ("logs", "logs/agent"):
            folder = tarfile.TarInfo(name)
            folder.type = tarfile.DIRTYPE
            tar.addfile(folder)
        data = b"oracle output\n"
        member = tarfile.TarInfo("logs/agent/oracle.txt")
        member.size = len(data)
        tar.addfile(member, io.BytesIO(data))
    return buffer.getvalue()


def fed(stream: SnapshotStream, data: bytes, size: int) -> SnapshotStream:
    for start in range(0, len(data), size):
        stream(data[start : start + size])
    return stream


def test_the_line_and_the_archive_are_apart_however_the_chunks_fall() -> None:
    archive = logs_archive()
    for size in (1, 7, len(LINE) - 1, len(LINE), len(LINE) + 1, 4096, len(LINE) + len(archive)):
        stream = fed(SnapshotStream("/logs", 10**6, line=True), LINE + archive, size)
        assert stream.line == LINE.decode()
        snapshot = stream.snapshot()
        assert snapshot is not None, size
        member = snapshot.member("/logs/agent/oracle.txt")
        assert member is not None and member.size == len(b"oracle output\n")
        assert stream.size == len(archive)
        snapshot.close()


def test_without_a_line_everything_is_the_archive() -> None:
    stream = fed(SnapshotStream("/logs", 10**6, line=False), logs_archive(), 100)
    assert stream.line == ""
    snapshot = stream.snapshot()
    assert snapshot is not None and snapshot.member("/logs/agent") is not None
    snapshot.close()


def test_an_archive_past_the_limit_gives_no_snapshot() -> None:
    archive = logs_archive()
    stream = fed(SnapshotStream("/logs", len(archive) - 1, line=True), LINE + archive, 512)
    assert stream.too_large and stream.snapshot() is None
    assert stream.line == LINE.decode()  # the digest's line still decides the tamper check


def test_output_that_is_no_archive_gives_no_snapshot() -> None:
    stream = fed(SnapshotStream("/logs", 10**6, line=True), LINE + b"tar: something failed\n", 5)
    assert stream.snapshot() is None
    truncated = fed(SnapshotStream("/logs", 10**6, line=True), LINE + logs_archive()[:700], 64)
    assert truncated.snapshot() is None


def test_a_line_that_never_ends_is_not_taken_for_one() -> None:
    stream = fed(SnapshotStream("/logs", 10**6, line=True), b"x" * 10_000 + b"\n" + logs_archive(), 1000)
    assert stream.snapshot() is None


def test_an_archive_of_a_link_in_place_of_the_folder_is_not_used() -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        link = tarfile.TarInfo("logs")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc"
        tar.addfile(link)
    stream = fed(SnapshotStream("/logs", 10**6, line=False), buffer.getvalue(), 100)
    assert stream.snapshot() is None
