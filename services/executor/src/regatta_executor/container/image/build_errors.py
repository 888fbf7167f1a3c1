"""How a task's image fails to build: the errors (a fault, or the task's own defect, build_defects.py), the
failures that repeat the same way if retried, and the message naming the failing step and its last lines."""

from __future__ import annotations

import re
from collections import deque

# What a build error keeps of the failing step's output: its last lines, each cut short.
ERROR_LINES = 12
ERROR_LINE_CHARS = 300
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]|\x1b\[[0-9;]*[A-Za-z]")


class ImageBuildError(RuntimeError):
    """A task's Dockerfile does not build, or not within its build timeout, or is refused."""


class BuildTimeout(Exception):
    pass


class ImageDefectError(ImageBuildError):
    """The Dockerfile's own step exits non-zero (build_defects.py): the task's defect, not a fault."""


class DeterministicFailure(Exception):
    """A build that fails the same way if repeated (a failing step, the time or size cap)."""


class StepFailed(DeterministicFailure):
    """A step's command exited non-zero, with no sign of a network fault: the task's own defect."""


def build_error(step: str, output: deque[str], error: str) -> str:
    """`Step 3/5 : RUN …` and the last lines it printed, then the engine's error (one line each)."""
    message = "the Dockerfile does not build: "
    message += f"{step} failed: " if step else ""
    message += printable(error, ERROR_LINE_CHARS)
    lines = [printable(line, ERROR_LINE_CHARS) for line in output]
    if lines:
        message += "\nlast output of the step:\n" + "\n".join(f"  {line}" for line in lines)
    return message


def printable(text: str, limit: int) -> str:
    cleaned = CONTROL.sub("", text).strip()
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 3] + "..."
