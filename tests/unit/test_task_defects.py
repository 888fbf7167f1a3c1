"""A task's own deterministic defect (issue 38): a Dockerfile step that exits non-zero is recorded once as
a task defect, never retried; everything else a build can end with stays an infrastructure fault."""

from __future__ import annotations

import pytest
from harbor.environments.base import SandboxBuildFailedError
from regatta_executor.attempt.outcome import classify
from regatta_executor.attempt.runner import retryable
from regatta_executor.container.image.build_defects import TaskDefectError, is_task_defect, step_exit_code
from regatta_shared.rules.task_defects import TASK_DEFECT, attempt_is_task_defect

CLASSIC = "The command '/bin/sh -c exit 3' returned a non-zero code: 3"
BUILDKIT = 'process "/bin/sh -c exit 3" did not complete successfully: exit code: 3'


def test_a_step_that_exits_non_zero_is_the_tasks_defect() -> None:
    assert step_exit_code(CLASSIC) == step_exit_code(BUILDKIT) == 3
    assert is_task_defect(CLASSIC, ["make: *** [all] Error 3"])
    assert is_task_defect(BUILDKIT, [])


@pytest.mark.parametrize(
    ("error", "output"),
    [
        # A step killed by a signal: the host's memory, a stopped engine.
        ("The command '/bin/sh -c make' returned a non-zero code: 137", []),
        # The step's command failed because the network did.
        (CLASSIC, ["curl: (6) Could not resolve host: example.org"]),
        (CLASSIC, ["E: Failed to fetch http://deb.debian.org/debian/pool/x.deb  Connection timed out"]),
        (CLASSIC, ["Temporary failure in name resolution"]),
        # Not a step's exit at all: the engine, a pull, a context.
        ("pull access denied for nosuch, repository does not exist", []),
        ("failed to register layer: no space left on device", []),
    ],
)
def test_other_build_failures_stay_infrastructure(error: str, output: list[str]) -> None:
    assert not is_task_defect(error, output)


def test_the_defect_is_errored_once_and_never_retried() -> None:
    assert TaskDefectError.__name__ == TASK_DEFECT and issubclass(TaskDefectError, SandboxBuildFailedError)
    # Harbor's table does not know the name and would retry it; the platform does not.
    exception = {"exception_type": TASK_DEFECT, "exception_message": "task defect: …", "policy": None}
    outcome = classify({"exception_info": exception}, pass_threshold=1.0)
    assert (outcome.outcome, outcome.retryable, retryable(outcome)) == ("errored", False, False)
    fault = {"exception_type": "SandboxBuildFailedError", "exception_message": "…", "policy": None}
    assert retryable(classify({"exception_info": fault}, pass_threshold=1.0))


def test_an_attempt_row_says_whether_it_was_a_task_defect() -> None:
    assert attempt_is_task_defect({"outcome": "errored", "result": {"exception_type": TASK_DEFECT}})
    assert not attempt_is_task_defect({"outcome": "errored", "result": {"exception_type": "SealError"}})
    assert not attempt_is_task_defect({"outcome": None, "result": None})
