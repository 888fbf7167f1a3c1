"""`regatta task try` packs a task folder before anything is sent: what it refuses (naming the file), what it
leaves out, and what the archive holds (read back with tarfile, as the gateway reads it)."""

from __future__ import annotations

import os
import re
import socket
import tarfile
from pathlib import Path

import pytest

from regatta.task_pack import PackBounds, PackRefused, pack_folder
from tests.support.tasks import write_task


def _names(folder: Path, bounds: PackBounds | None = None) -> dict[str, bytes]:
    with pack_folder(folder, bounds) as packed, tarfile.open(fileobj=packed, mode="r:gz") as archive:
        return {
            m.name: (archive.extractfile(m).read() if m.isfile() else b"<dir>")  # type: ignore[union-attr]
            for m in archive.getmembers()
        }


def test_a_task_folder_is_packed_under_its_name_links_inside_as_files_hidden_left_out(tmp_path: Path) -> None:
    task = write_task(tmp_path, "my-task")
    (task / "tests" / "again.sh").symlink_to("test.sh")
    (task / ".git").mkdir()
    (task / ".git" / "config").write_text("secret remote\n")
    (task / ".env").write_text("KEY=1\n")
    packed = _names(task)
    assert packed["my-task/tests/again.sh"] == (task / "tests" / "test.sh").read_bytes()
    assert "my-task/task.toml" in packed and "my-task/environment/Dockerfile" in packed
    assert not [n for n in packed if "/." in n], sorted(packed)
    assert all(name.startswith("my-task/") for name in packed), sorted(packed)


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (
            lambda t: (t / "tests" / "hostname").symlink_to("/etc/hostname"),
            "tests/hostname links outside the folder",
        ),
        (
            lambda t: (t / "tests" / "up").symlink_to("../../elsewhere.txt"),
            "tests/up links outside the folder",
        ),
        (lambda t: (t / "env").symlink_to("environment"), "env is a link to a folder"),
        (lambda t: (t / "tests" / "gone").symlink_to("missing.txt"), "tests/gone is a link to nothing"),
        (lambda t: os.mkfifo(t / "tests" / "pipe"), "tests/pipe is not a file, a folder or a link"),
    ],
)
def test_what_no_task_archive_may_hold_is_refused_naming_the_file(tmp_path: Path, make, said: str) -> None:
    (tmp_path / "elsewhere.txt").write_text("not the task's\n")
    task = write_task(tmp_path / "src", "my-task")
    make(task)
    with pytest.raises(PackRefused, match=said):
        pack_folder(task)


def test_a_socket_and_the_bounds_are_refused(tmp_path: Path) -> None:
    task = write_task(tmp_path, "t")
    listener = socket.socket(socket.AF_UNIX)
    try:
        listener.bind(str(task / "tests" / "sock"))
        with pytest.raises(PackRefused, match="tests/sock is not a file"):
            pack_folder(task)
    finally:
        listener.close()
        (task / "tests" / "sock").unlink()
    (task / "environment" / "big.bin").write_bytes(bytes(2048))
    with pytest.raises(PackRefused, match=re.escape("its files pass 0 MiB at environment/big.bin")):
        pack_folder(task, PackBounds(max_bytes=1024))
    with pytest.raises(PackRefused, match="more than 3 files and folders"):
        pack_folder(task, PackBounds(max_files=3))


def test_a_folder_without_a_task_is_refused(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "notes.md").write_text("no task here\n")
    with pytest.raises(PackRefused, match="holds no task"):
        pack_folder(tmp_path)
    with pytest.raises(PackRefused, match="is not a folder"):
        pack_folder(tmp_path / "missing")
    write_task(tmp_path / "suite", "a")
    write_task(tmp_path / "suite", "b")
    assert {n.split("/")[1] for n in _names(tmp_path / "suite")} == {"a", "b"}
