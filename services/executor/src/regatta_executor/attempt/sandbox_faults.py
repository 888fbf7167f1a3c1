"""Errors that the state the agent left its sandbox in causes: each ends the attempt `failed`, with the
reason shown, never `errored` (outcome.SANDBOX_FAULTS lists their names, as Harbor records them).

Harbor records an exception by its class name, so these names are part of the outcome rule: renaming
one without outcome.SANDBOX_FAULTS turns the agent's failure back into no score.
"""

from __future__ import annotations


class SandboxFaultError(RuntimeError):
    """The sandbox is in a state in which the verifier cannot give an honest verdict."""


class SandboxTamperedError(SandboxFaultError):
    """The agent changed, deleted or shadowed an executable or library of the image."""


class StorageLimitExceededError(SandboxFaultError):
    """The container's writable layer outgrew the task's storage_mb."""


class VerifierCannotRunError(SandboxFaultError):
    """A platform step before the verifier failed inside the sandbox (say, its shell is gone)."""
