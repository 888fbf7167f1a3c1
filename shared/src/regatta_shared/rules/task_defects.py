"""A task's own deterministic defect (statistics.md §1): its Dockerfile fails at a step that exits
non-zero, the same on every try. Neither the agent's failure (never scored) nor a transient fault
(never retried, never offered for "Re-run errored attempts"): the attempt is recorded `errored` once,
with this exception type, and a workspace admin may exclude the task from the benchmark's version
(BenchmarkTaskExcluded) so that runs rank on the remaining tasks.

Pure: read by the executor (which decides it), the gateway (re-runs, the run page) and scoring.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TASK_DEFECT = "TaskDefectError"
LABEL = "task defect"


def is_task_defect(exception_type: str | None) -> bool:
    return exception_type == TASK_DEFECT


def attempt_is_task_defect(row: Mapping[str, Any]) -> bool:
    """An attempt row (regatta_shared.runs) whose finish was a task defect."""
    result = row.get("result") or {}
    return row.get("outcome") == "errored" and is_task_defect(result.get("exception_type"))
