"""Which failed builds are the task's own defect (regatta_shared.rules.task_defects): the engine ran a
Dockerfile step and that step's command exited with a code of its own. Everything else a build can
end with stays an infrastructure fault, retried: a timeout, an engine or API error, a pull, a step
killed by a signal (exit code past 128: the host's memory pressure, a stopped engine), or a step whose
last output shows a network fault (a RUN that downloads fails the same way as one that is broken).
Pure: the engine's error message and the step's last lines in, a verdict out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from harbor.environments.base import SandboxBuildFailedError
from regatta_shared.rules.task_defects import TASK_DEFECT

# The classic builder's "The command '/bin/sh -c exit 3' returned a non-zero code: 3"; BuildKit's
# "process "/bin/sh -c exit 3" did not complete successfully: exit code: 3".
_STEP_EXIT = re.compile(r"returned a non-zero code: (\d+)|did not complete successfully: exit code: (\d+)")
_NETWORK_FAULT = re.compile(
    r"temporary failure (in name resolution|resolving)|could not resolve|name or service not known"
    r"|connection (timed out|refused|reset)|network is unreachable|no route to host|failed to fetch"
    r"|tls handshake timeout|i/o timeout|read timed out|connecttimeout|readtimeout|econn(reset|refused)"
    r"|getaddrinfo|unable to connect|could not connect",
    re.IGNORECASE,
)
SIGNALLED = 128


class TaskDefectError(SandboxBuildFailedError):
    """The task's Dockerfile fails at a step, deterministically: recorded once, never retried."""


assert TaskDefectError.__name__ == TASK_DEFECT  # the name Harbor records as the exception type


def step_exit_code(error: str) -> int | None:
    """The exit code of the step the engine's `error` says failed, if it says one did."""
    match = _STEP_EXIT.search(error)
    if match is None:
        return None
    return int(match.group(1) or match.group(2))


def is_task_defect(error: str, output: Iterable[str]) -> bool:
    code = step_exit_code(error)
    if code is None or code == 0 or code > SIGNALLED:
        return False
    return not any(_NETWORK_FAULT.search(line) for line in [error, *output])
