"""Builds that failed, remembered per (digest, run): a run's other attempts of that digest end at once
with the same error instead of each repeating a build that fails the same way (minutes, for a build
that times out). A new run (the user's Retry starts one) builds again.

Kept next to the image locks (`<state_dir>/images/failed/`), written and read under the digest's lock,
so executors on one host sharing a state folder agree. The file name is a hash of digest and run id:
neither reaches a path as written.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path

MAX_MESSAGE = 4000
# First line of a remembered failure that was the task's own defect (build_defects.py).
_DEFECT = "task-defect\n"


class BuildFailures:
    def __init__(self, locks: Path) -> None:
        self.folder = locks / "failed"

    def _path(self, digest: str, run_id: str) -> Path:
        key = hashlib.sha256(f"{digest}\0{run_id}".encode()).hexdigest()[:40]
        return self.folder / f"{key}.txt"

    def get(self, digest: str, run_id: str | None) -> tuple[str, bool] | None:
        """The failure's message, and whether it was the task's own defect."""
        if not run_id:
            return None
        try:
            text = self._path(digest, run_id).read_text(errors="replace")
        except FileNotFoundError:
            return None
        defect = text.startswith(_DEFECT)
        return text.removeprefix(_DEFECT)[:MAX_MESSAGE], defect

    def record(self, digest: str, run_id: str | None, message: str, *, defect: bool = False) -> None:
        if not run_id:
            return
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = self._path(digest, run_id)
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text((_DEFECT if defect else "") + message[:MAX_MESSAGE])
        os.replace(temporary, path)

    def prune(self, max_age_sec: float, now: float) -> None:
        """Forget failures older than `max_age_sec` (a run does not last that long)."""
        if not self.folder.is_dir():
            return
        for path in self.folder.glob("*.txt"):
            with contextlib.suppress(FileNotFoundError):
                if now - path.stat().st_mtime > max_age_sec:
                    path.unlink()
