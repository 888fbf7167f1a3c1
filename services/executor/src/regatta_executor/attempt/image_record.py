"""The image an attempt's container ran, handed from the environment to the attempt's report.

The environment runs inside Harbor's trial, which returns no word of it: it leaves this record in the
trial's folder (the host's, which nothing in the container writes), and the attempt reads it back into
its finished report (AttemptFinished.image). A record that is missing, too large or not exactly an
AttemptImage is no record: the attempt is reported without one.
"""

from __future__ import annotations

from pathlib import Path

from regatta_shared.events import AttemptImage

from regatta_executor.attempt.trial_records import read_record, write_record

IMAGE_RECORD = "environment-image.json"
MAX_RECORD_BYTES = 4096


def write_image_record(trial_dir: Path, image: AttemptImage) -> None:
    write_record(trial_dir, IMAGE_RECORD, image)


def read_image_record(trial_dir: Path) -> AttemptImage | None:
    return read_record(trial_dir, IMAGE_RECORD, AttemptImage, MAX_RECORD_BYTES)
