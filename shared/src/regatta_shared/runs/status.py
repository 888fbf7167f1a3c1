"""A run's status, once: its words, which of them a run is still active in and which are final. The fold
(fold.py: which event sets which), the run scheduler's aggregate, the gateway's read models, queries,
API filter and workspace rules all use these names.
"""

from __future__ import annotations

from typing import Literal, get_args

RunStatus = Literal["pending", "queued", "running", "finished", "failed", "stopped"]
# In this order wherever they are listed (the API's filter, the web UI's).
RUN_STATUSES: tuple[RunStatus, ...] = get_args(RunStatus)

PENDING: RunStatus = "pending"
QUEUED: RunStatus = "queued"
RUNNING: RunStatus = "running"
FINISHED: RunStatus = "finished"
FAILED: RunStatus = "failed"
STOPPED: RunStatus = "stopped"

NOT_STARTED: frozenset[RunStatus] = frozenset({PENDING, QUEUED})
ACTIVE: frozenset[RunStatus] = frozenset({PENDING, QUEUED, RUNNING})
TERMINAL: frozenset[RunStatus] = frozenset({FINISHED, FAILED, STOPPED})
# Ended before every attempt finished; the run records why (RunFailed's or RunStopped's reason).
ENDED_EARLY: frozenset[RunStatus] = frozenset({FAILED, STOPPED})
