"""What a source resolves to: a named, versioned list of local task folders, ready to be read."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from .manifest import ManifestFile


class SourceInvalid(Exception):
    """The source cannot be read; the message names the file, repository or dataset, and the problem."""


@dataclass(frozen=True)
class TaskLocation:
    name: str
    path: Path
    expected_digest: str | None = None
    # Refused before its files were fetched (git_bounds): listed invalid with this reason, never read.
    refused: str | None = None


@dataclass
class Dataset:
    name: str
    version: str | None
    tasks: list[TaskLocation]
    description: str | None = None
    manifest: ManifestFile | None = None
    commit: str | None = None
    files: dict[str, str] = field(default_factory=dict)
    expected_digest: str | None = None


def dataset_digest(task_digests: list[str], files: dict[str, str] | None = None) -> str:
    """Harbor's dataset hash (harbor.md §2.2): sorted task digests; then sorted `path:digest` files."""
    base = ",".join(sorted(d.removeprefix("sha256:") for d in task_digests))
    if files:
        base += ";" + ",".join(sorted(f"{path}:{d.removeprefix('sha256:')}" for path, d in files.items()))
    return "sha256:" + hashlib.sha256(base.encode()).hexdigest()
