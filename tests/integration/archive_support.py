"""What the archive-bomb tests share: a 1 GiB file of zeros made without 1 GiB on disk or in memory, and a
small tmpfs on which writing a bomb before refusing it fails with ENOSPC instead of passing."""

from __future__ import annotations

import io
import subprocess
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.conftest import unavailable

GIB = 1024 * 1024 * 1024


class Zeros(io.RawIOBase):
    """`size` zero bytes, read as a file."""

    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        count = min(len(buffer), self.left)
        buffer[:count] = bytes(count)
        self.left -= count
        return count


def file_member(name: str, data: bytes) -> tuple[tarfile.TarInfo, io.BytesIO]:
    member = tarfile.TarInfo(name)
    member.size = len(data)
    member.mode = 0o644
    return member, io.BytesIO(data)


def archive(members: list[tuple[tarfile.TarInfo, io.IOBase | None]], level: int = 6) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz", compresslevel=level) as tar:
        for member, data in members:
            tar.addfile(member, data)  # type: ignore[arg-type]
    return out.getvalue()


def zeros_bomb(extra: list[tuple[tarfile.TarInfo, io.IOBase | None]]) -> bytes:
    """`extra` and environment/zeros.bin, 1 GiB of zeros: about 1 MiB compressed (deflate's best)."""
    member = tarfile.TarInfo("environment/zeros.bin")
    member.size = GIB
    member.mode = 0o644
    return archive([*extra, (member, Zeros(GIB))], level=9)


@contextmanager
def small_disk(folder: Path, size: str = "8m") -> Iterator[Path]:
    """An 8 MiB (or `size`) tmpfs of 2,000 inodes at `folder`: code that wrote a bomb's bytes (or files)
    before refusing it would hit ENOSPC (an OSError, not the refusal a test expects)."""
    folder.mkdir(parents=True)
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},nr_inodes=2000", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        unavailable(f"mounting a tmpfs (needs root): {result.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=False)
