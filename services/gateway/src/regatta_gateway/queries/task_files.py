"""A task's files for reading, from its archive in the task object store, as hostile input.

The archive was bounded by registry-sync, but the gateway trusts no header either: it walks the stream under
the same bounds as the executor (`TaskFileBounds`: entries, bytes, expansion), keeps at most `SHOWN_BYTES` of
each file and `TOTAL_SHOWN_BYTES` of all (instruction.md and task.toml always), and lists only regular files
whose names Python's `data` filter accepts (no absolute path, no `..`, nothing outside the task). A file that
is not UTF-8 text is listed as binary with its size; text is returned as text and escaped by whoever renders
it.
"""

from __future__ import annotations

import gzip
import io
import tarfile
import zlib
from dataclasses import dataclass
from typing import Any

from regatta_shared.rules.ceilings import TaskFileBounds

SHOWN_BYTES = 256 * 1024  # of one file, in the page, the API and the CLI
TOTAL_SHOWN_BYTES = 4 * 1024 * 1024  # of all files: past it, files are listed without content
SNIFF_BYTES = 8192  # a NUL in the first bytes makes a file binary
_ROOT = "/nonexistent-task-root"
_MIB = 1024 * 1024

# A file's place in a Harbor task, by its first path segment.
SECTIONS = {"environment": "environment", "tests": "tests", "solution": "solution"}
SINGLE = {"instruction.md": "instruction", "task.toml": "config"}


class TaskFilesUnreadable(Exception):
    """The archive passes a bound or is not an archive; the message names which."""


@dataclass(frozen=True)
class TaskFile:
    path: str
    size: int
    binary: bool
    text: str | None
    truncated: bool

    @property
    def section(self) -> str:
        head, _, rest = self.path.partition("/")
        return SECTIONS.get(head, "other") if rest else SINGLE.get(self.path, "other")

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "section": self.section,
            "size": self.size,
            "kind": "binary" if self.binary else "text",
            "truncated": self.truncated,
            "content": self.text,
        }


def read_task_files(data: bytes, bounds: TaskFileBounds, label: str) -> list[TaskFile]:
    """Every regular file of the tar.gz `data`, sorted by path, each holding at most SHOWN_BYTES of text
    while TOTAL_SHOWN_BYTES last (a text file past them: `text` None, `truncated`)."""
    files: list[TaskFile] = []
    expanded = 0
    budget = TOTAL_SHOWN_BYTES
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r|gz") as archive:
            for entries, member in enumerate(archive, start=1):
                if entries > bounds.max_files:
                    raise TaskFilesUnreadable(f"task {label!r}: more than {bounds.max_files} archive entries")
                try:
                    member = tarfile.data_filter(member, _ROOT)
                except tarfile.FilterError as error:
                    raise TaskFilesUnreadable(f"task {label!r}: archive entry refused ({error})") from None
                if not member.isfile():
                    continue  # folders carry nothing to read; registry-sync writes nothing else
                source = archive.extractfile(member)
                if source is None:
                    continue
                # instruction.md and task.toml are always shown, whatever came before them
                spent = budget <= 0 and member.name not in SINGLE
                limit = SNIFF_BYTES if spent else min(SHOWN_BYTES, max(budget, SNIFF_BYTES))
                kept = bytearray()
                size = 0
                while chunk := source.read(_MIB):
                    size += len(chunk)
                    expanded += len(chunk)
                    _check(expanded, len(data), bounds, label, member.name)
                    if len(kept) < limit:
                        kept += chunk[: limit - len(kept)]
                shown = _file(member.name, size, bytes(kept))
                if spent and not shown.binary:
                    shown = TaskFile(member.name, size, False, None, True)  # listed; its text not shown
                budget -= len(shown.text.encode()) if shown.text else 0
                files.append(shown)
    except (tarfile.TarError, EOFError, gzip.BadGzipFile, zlib.error) as error:
        raise TaskFilesUnreadable(f"task {label!r}: its archive cannot be read ({error})") from None
    return sorted(files, key=lambda f: f.path)


def _check(expanded: int, compressed: int, bounds: TaskFileBounds, label: str, name: str) -> None:
    if expanded > bounds.max_bytes:
        raise TaskFilesUnreadable(f"task {label!r}: its files pass {bounds.max_bytes // _MIB} MiB at {name}")
    if bounds.over_expansion(expanded, compressed):
        raise TaskFilesUnreadable(
            f"task {label!r}: its archive expands more than {bounds.max_expansion:g} times at {name}"
        )


def _file(path: str, size: int, kept: bytes) -> TaskFile:
    truncated = size > len(kept)
    text = None if b"\x00" in kept[:SNIFF_BYTES] else _utf8(kept, truncated)
    if text is None:
        return TaskFile(path, size, True, None, False)
    return TaskFile(path, size, False, text, truncated)


def _utf8(shown: bytes, truncated: bool) -> str | None:
    # A cut may split a character: up to three bytes of a sequence may be dropped at the end.
    for cut in range(4 if truncated else 1):
        try:
            return shown[: len(shown) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return None
