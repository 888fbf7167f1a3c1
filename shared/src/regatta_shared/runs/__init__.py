"""What a run's events mean, once: attempt rows, totals, statuses and the expected attempt count.

Pure (no I/O, no SQLAlchemy): the gateway's projection, the run snapshot, scoring and the run
scheduler's aggregate all fold run events through these functions, so they cannot disagree.
tests/integration/test_fold_agreement.py holds them to it on generated histories.
"""

from .attempts import (
    ATTEMPT_EVENTS,
    attempt_change,
    attempts_per_agent,
    expected_attempts,
    scheduled_row,
    trial_start,
)
from .fold import STATUS_BY_EVENT, RunFold, keeps_scores, public_submission, rerun_rows
from .integrity import INTEGRITY_COLUMNS, INTEGRITY_FILTERS, integrity_columns, integrity_summary
from .status import TERMINAL
from .totals import RUN_TOTALS, count_environment, no_totals, with_finished

__all__ = [
    "ATTEMPT_EVENTS",
    "INTEGRITY_COLUMNS",
    "INTEGRITY_FILTERS",
    "RUN_TOTALS",
    "STATUS_BY_EVENT",
    "TERMINAL",
    "RunFold",
    "attempt_change",
    "attempts_per_agent",
    "count_environment",
    "expected_attempts",
    "integrity_columns",
    "integrity_summary",
    "keeps_scores",
    "no_totals",
    "public_submission",
    "rerun_rows",
    "scheduled_row",
    "trial_start",
    "with_finished",
]
