"""Hub task archives walked under the task bounds before Harbor's task client extracts them.

Harbor's `TaskClient` downloads a task's `dist.tar.gz` and extracts it in full (`tarfile.open(...)` then
`extractall`): a 1 GiB file of zeros, a few hundred KB on the hub, would be written to this service's
disk before any check of ours. `install()` rebinds only the `tarfile` name of `harbor.tasks.client` to a
stand-in whose `open()` of an archive file for reading first walks it without writing
(regatta_shared.security.task_archives, the executor's own rule), so a bomb is refused, naming the file or the
count, before Harbor writes a byte of it. Every other use of `tarfile`, in Harbor and here, is untouched.
"""

from __future__ import annotations

import os
import tarfile
from pathlib import Path
from typing import Any

import harbor.tasks.client as harbor_task_client
from regatta_shared.rules.ceilings import TaskFileBounds
from regatta_shared.security.task_archives import check_archive_file


class _BoundedTarfile:
    def __init__(self, bounds: TaskFileBounds) -> None:
        self.bounds = bounds

    def __getattr__(self, name: str) -> Any:
        return getattr(tarfile, name)

    def open(self, name: Any = None, mode: str = "r", *args: Any, **kwargs: Any) -> tarfile.TarFile:
        if isinstance(name, (str, os.PathLike)) and mode.startswith("r"):
            check_archive_file(Path(name), self.bounds, "hub task archive")
        return tarfile.open(name, mode, *args, **kwargs)


def install(bounds: TaskFileBounds) -> None:
    """Idempotent; the latest bounds win (every sync of this process has the same)."""
    harbor_task_client.tarfile = _BoundedTarfile(bounds)  # type: ignore[assignment]
