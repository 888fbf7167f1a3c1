"""The platform's execution defaults: what a run gets for each `[execution]` setting it leaves out.

Defined once: the gateway's run config (what a submission is completed with), the RunSubmitted event,
the attempt jobs the scheduler sends, the benchmark's and the leaderboard's standard conditions
(conditions.py) and docs/runs.md all take them from here (tests/unit/test_execution_defaults.py holds
the docs to it).
"""

from __future__ import annotations

from typing import Final

ATTEMPTS_PER_TASK: Final = 1
MAX_CONCURRENT_ATTEMPTS: Final = 4
TIMEOUT_MULTIPLIER: Final = 1.0
MAX_RETRIES: Final = 0
# An attempt passes when its primary reward reaches this, unless the benchmark or the run sets another.
PASS_THRESHOLD: Final = 1.0
# Harbor's semantics in a shared verifier container, with integrity recorded as evidence
# (events/integrity.py); a benchmark's standard conditions may name "enforce" instead.
VERIFIER_INTEGRITY: Final = "record"

DEFAULTS: Final = {
    "attempts_per_task": ATTEMPTS_PER_TASK,
    "max_concurrent_attempts": MAX_CONCURRENT_ATTEMPTS,
    "timeout_multiplier": TIMEOUT_MULTIPLIER,
    "max_retries": MAX_RETRIES,
    "pass_threshold": PASS_THRESHOLD,
    "verifier_integrity": VERIFIER_INTEGRITY,
}
