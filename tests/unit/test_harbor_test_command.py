"""What the container environment takes for Harbor's run of a test script (harbor_commands), and how
the output of that run is split from the archive of /logs/verifier that follows it
(snapshots.MarkedSnapshotStream)."""

from __future__ import annotations

import io
import tarfile

import pytest
from harbor.utils.scripts import build_execution_command
from regatta_executor.container.exec.harbor_commands import runs_test_script
from regatta_executor.container.files.snapshots import MarkedSnapshotStream

MARKER = "regatta-verifier-logs-" + "ab" * 16


def test_harbors_own_test_command_is_recognised() -> None:
    command = build_execution_command("/tests/test.sh", stdout_path="/logs/verifier/test-stdout.txt")
    assert runs_test_script(command)


@pytest.mark.parametrize(
    "command",
    [
        "/tests/test.sh > /logs/verifier/test-stdout.txt 2>&1",  # not Harbor's shape
        "(/tests/test.sh) > /logs/verifier/test-stdout.txt",  # stderr not redirected
        "(/tests/test.sh; cat /etc/passwd) > /logs/verifier/out.txt 2>&1",  # more than the script
        "(/opt/test.sh) > /logs/verifier/out.txt 2>&1",  # not under /tests
        "(/tests/../bin/sh) > /logs/verifier/out.txt 2>&1",
        "(/tests/test.sh) > /tmp/out.txt 2>&1",  # output elsewhere
        "(/tests/test.sh) > /logs/verifier/sub/out.txt 2>&1",
        "(/tests/test.sh) > /logs/verifier/out.txt 2>&1; echo more",
        "('/tests/test.sh) > /logs/verifier/out.txt 2>&1",
    ],
)
def test_anything_else_is_not(command: str) -> None:
    assert not runs_test_script(command)


def verifier_archive() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name in ("verifier",):
            folder = tarfile.TarInfo(name)
            folder.type = tarfile.DIRTYPE
            tar.addfile(folder)
        member = tarfile.TarInfo("verifier/reward.txt")
        member.size = 2
        tar.addfile(member, io.BytesIO(b"1\n"))
    return buffer.getvalue()


@pytest.mark.parametrize("size", [1, 3, len(MARKER), len(MARKER) + 1, 100, 100_000])
def test_the_commands_output_and_the_archive_are_apart_however_the_chunks_fall(size: int) -> None:
    output = b"the command's own output, no line break at its end"
    data = output + MARKER.encode() + b"\n" + verifier_archive()
    stream = MarkedSnapshotStream("/logs/verifier", 10**6, MARKER)
    own = b"".join(stream(data[start : start + size]) for start in range(0, len(data), size))
    assert own + stream.rest() == output
    snapshot = stream.snapshot()
    assert snapshot is not None and snapshot.member("/logs/verifier/reward.txt") is not None
    snapshot.close()


def test_without_the_marker_everything_is_the_commands_and_there_is_no_archive() -> None:
    output = b"killed before the marker " + MARKER.encode()[:10]
    stream = MarkedSnapshotStream("/logs/verifier", 10**6, MARKER)
    own = b"".join(stream(output[start : start + 7]) for start in range(0, len(output), 7))
    assert own + stream.rest() == output
    assert stream.snapshot() is None
