"""Labels a member puts on an attempt ("reward hacking", "flaky task", "infra"), with a note. They live
on the run's stream beside the attempt events, so the audit log, downloads and every projection see them
in the run's own order; no service that decides a run's course reads them (a label never changes a
score)."""

from __future__ import annotations

from .base import Event


class AttemptLabelled(Event):
    type_name = "AttemptLabelled"
    category = "run"
    run_id: str
    attempt_id: str
    label_id: str
    label: str
    note: str = ""


class AttemptLabelRemoved(Event):
    type_name = "AttemptLabelRemoved"
    category = "run"
    run_id: str
    attempt_id: str
    label_id: str
    label: str
