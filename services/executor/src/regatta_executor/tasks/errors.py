"""The error of a task's environment that cannot run here, in a module of its own: the checks of the
task's environment (task_environment.py) and of its variables (task_variables.py) both raise it, and the
first calls the second, so neither may import the other for it (tests/unit/test_import_rules.py)."""

from __future__ import annotations


class TaskEnvironmentError(Exception):
    """The task's environment cannot run here at all: an error of the setup, never the agent's."""
