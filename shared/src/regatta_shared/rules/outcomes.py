"""An attempt's outcome, once: its words, and which of them a score counts. AttemptFinished records one
of them (events/runs.py); scoring, the totals, the gateway's filter and pages, and the re-run command
use these names. A leaf module (it imports nothing of the kernel), so the events can import it.
"""

from __future__ import annotations

from typing import Literal, get_args

Outcome = Literal["passed", "failed", "errored", "cancelled"]
# In this order wherever they are listed (the API's filter, the run page's).
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)

PASSED: Outcome = "passed"
FAILED: Outcome = "failed"
ERRORED: Outcome = "errored"
CANCELLED: Outcome = "cancelled"

# What pass@k counts (statistics.md §1): an errored or cancelled attempt says nothing of the agent.
SCORED: frozenset[Outcome] = frozenset({PASSED, FAILED})
UNSCORED: tuple[Outcome, ...] = tuple(outcome for outcome in OUTCOMES if outcome not in SCORED)
