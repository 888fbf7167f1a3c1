"""Reading a task's files from its archive for the task browser (regatta_gateway.queries.task_files), on
real tar.gz archives: each file bounded, all files bounded, the instruction always shown, UTF-8 cut cleanly,
binary named, and an archive with a path out of the task, too many entries or a bomb refused by name."""

from __future__ import annotations

import gzip
import io
import tarfile

import pytest
from regatta_gateway.queries.task_files import (
    SHOWN_BYTES,
    TOTAL_SHOWN_BYTES,
    TaskFilesUnreadable,
    read_task_files,
)
from regatta_shared.rules.ceilings import TaskFileBounds

from tests.support.task_archives import archive

BOUNDS = TaskFileBounds(max_bytes=64 * 1024 * 1024, max_files=100, max_expansion=200.0)


def by_path(data: bytes, bounds: TaskFileBounds = BOUNDS) -> dict[str, dict]:
    return {f.path: f.as_dict() for f in read_task_files(data, bounds, "t")}


def test_each_file_is_cut_at_256_kib_on_a_character_boundary() -> None:
    # "é" is two bytes: the cut at 256 KiB falls inside one.
    long_text = "a" + "é" * SHOWN_BYTES
    files = by_path(archive({"tests/long.txt": long_text.encode(), "tests/short.txt": b"ok\n"}))
    long = files["tests/long.txt"]
    assert long["truncated"] is True and long["size"] == len(long_text.encode())
    assert long_text.startswith(long["content"]) and len(long["content"].encode()) == SHOWN_BYTES - 1
    assert (files["tests/short.txt"]["content"], files["tests/short.txt"]["truncated"]) == ("ok\n", False)


def test_binary_files_are_named_with_their_size_and_no_content() -> None:
    files = by_path(archive({"environment/x.bin": b"\x00\x01" * 10, "environment/latin1.txt": b"caf\xe9\n"}))
    assert files["environment/x.bin"] == {
        "path": "environment/x.bin",
        "section": "environment",
        "size": 20,
        "kind": "binary",
        "truncated": False,
        "content": None,
    }
    assert files["environment/latin1.txt"]["kind"] == "binary"  # not UTF-8: never guessed at


def test_past_the_total_files_are_listed_without_text_but_the_instruction_is_shown() -> None:
    chunk = b"x" * SHOWN_BYTES
    count = TOTAL_SHOWN_BYTES // SHOWN_BYTES + 2
    files = {f"environment/f{i:02d}.txt": chunk for i in range(count)}
    # Written last, so the budget is spent before them.
    files |= {"task.toml": b'version = "1.0"\n', "instruction.md": b"# Do it\n"}
    read = by_path(archive(files), TaskFileBounds(64 * 1024 * 1024, 100, 10_000.0))
    shown = [p for p, f in read.items() if p.startswith("environment/") and f["content"] is not None]
    hidden = [p for p, f in read.items() if p.startswith("environment/") and f["content"] is None]
    assert len(shown) == TOTAL_SHOWN_BYTES // SHOWN_BYTES and len(hidden) == 2
    assert all(read[p]["truncated"] and read[p]["kind"] == "text" for p in hidden)
    assert read["instruction.md"]["content"] == "# Do it\n" and read["task.toml"]["section"] == "config"


@pytest.mark.parametrize("name", ["../escape.txt", "tests/../../up.txt"])
def test_a_path_out_of_the_task_refuses_the_archive_naming_it(name: str) -> None:
    with pytest.raises(TaskFilesUnreadable, match="archive entry refused"):
        read_task_files(archive({"instruction.md": b"hi", name: b"out"}), BOUNDS, "t")


def test_an_absolute_name_is_read_inside_the_task() -> None:
    # The data filter drops the leading slash: the name stays in the task, as an executor would unpack it.
    assert sorted(by_path(archive({"/etc/passwd": b"x"}))) == ["etc/passwd"]


def test_a_link_out_of_the_task_refuses_the_archive() -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        link = tarfile.TarInfo("environment/passwd")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    # The data filter refuses a link out of the task (registry-sync stores links as the files they name).
    with pytest.raises(TaskFilesUnreadable, match="environment/passwd"):
        read_task_files(buffer.getvalue(), BOUNDS, "t")


def test_too_many_entries_a_bomb_and_garbage_are_refused() -> None:
    many = archive({f"tests/{i}.txt": b"" for i in range(101)})
    with pytest.raises(TaskFilesUnreadable, match="more than 100 archive entries"):
        read_task_files(many, BOUNDS, "t")
    bomb = archive({"tests/zeros.txt": b"\0" * (17 * 1024 * 1024)})  # past the 16 MiB floor
    with pytest.raises(TaskFilesUnreadable, match=r"expands more than 200 times at tests/zeros\.txt"):
        read_task_files(bomb, BOUNDS, "t")
    with pytest.raises(TaskFilesUnreadable, match="cannot be read"):
        read_task_files(gzip.compress(b"not a tar" * 100), BOUNDS, "t")
