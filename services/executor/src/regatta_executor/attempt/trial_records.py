"""Records an environment leaves for its attempt's report in the trial's folder on the host (nothing in
the sandbox writes there): the environment runs inside Harbor's trial, which returns no word of them. A
record that is missing, a link, too large or not exactly its model is no record."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ValidationError


def write_record(trial_dir: Path, name: str, record: BaseModel) -> None:
    trial_dir.mkdir(parents=True, exist_ok=True)
    (trial_dir / name).write_text(record.model_dump_json())


def read_record[M: BaseModel](trial_dir: Path, name: str, model: type[M], max_bytes: int) -> M | None:
    try:
        descriptor = os.open(trial_dir / name, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(descriptor, "rb") as handle:
        raw = handle.read(max_bytes + 1)
    if len(raw) > max_bytes:
        return None
    try:
        return model.model_validate_json(raw)
    except ValidationError:
        return None
