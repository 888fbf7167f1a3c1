"""The image an attempt's container ran, handed from the environment to the attempt's report.

The environment runs inside Harbor's trial, which returns no word of it: it leaves this record in the
trial's folder (the host's, which nothing in the container writes), and the attempt reads it back into
its finished report (AttemptFinished.image). A record that is missing, too large or not exactly an
AttemptImage is no record: the attempt is reported without one.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import ValidationError
from regatta_shared.events import AttemptImage

IMAGE_RECORD = "environment-image.json"
MAX_RECORD_BYTES = 4096


def write_image_record(trial_dir: Path, image: AttemptImage) -> None:
    trial_dir.mkdir(parents=True, exist_ok=True)
    (trial_dir / IMAGE_RECORD).write_text(image.model_dump_json())


def read_image_record(trial_dir: Path) -> AttemptImage | None:
    try:
        descriptor = os.open(trial_dir / IMAGE_RECORD, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(descriptor, "rb") as handle:
        raw = handle.read(MAX_RECORD_BYTES + 1)
    if len(raw) > MAX_RECORD_BYTES:
        return None
    try:
        return AttemptImage.model_validate_json(raw)
    except ValidationError:
        return None
