"""Uploads an attempt's logs, trajectory, verifier output and collected artifacts by content digest."""

from __future__ import annotations

import hashlib
from pathlib import Path

from nats.js.errors import NotFoundError
from nats.js.object_store import ObjectStore
from regatta_shared.events import ArtifactRef

COLLECTED = ("agent", "verifier", "artifacts")
MAX_FILE_BYTES = 20 * 1024 * 1024
MAX_FILES = 200


def collect(trial_dir: Path) -> list[tuple[str, Path]]:
    files: list[tuple[str, Path]] = []
    for folder in COLLECTED:
        base = trial_dir / folder
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*")):
            if path.is_file() and not path.is_symlink() and path.stat().st_size <= MAX_FILE_BYTES:
                files.append((path.relative_to(trial_dir).as_posix(), path))
    for name in ("result.json", "trial.log", "exception.txt"):
        if (trial_dir / name).is_file():
            files.append((name, trial_dir / name))
    return files[:MAX_FILES]


async def upload(store: ObjectStore, trial_dir: Path, redact: list[str] | None = None) -> list[ArtifactRef]:
    refs: list[ArtifactRef] = []
    for relative, path in collect(trial_dir):
        data = path.read_bytes()
        for secret in redact or []:
            if secret:
                data = data.replace(secret.encode(), b"[REDACTED]")
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        try:
            await store.get_info(digest)
        except NotFoundError:
            await store.put(digest, data)
        refs.append(ArtifactRef(path=relative, digest=digest, size=len(data)))
    return refs
