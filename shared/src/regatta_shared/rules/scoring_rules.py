"""The version of the rules that turn attempts into scores (outcome rules and statistics), and the
outcome rule itself where scoring must apply it to attempts recorded under an earlier version.

Every RunScored names the version that produced it; a leaderboard ranks only scores of the current
version together (regatta_scoring.leaderboard), and `regatta admin rescore` brings older ones up to it.
Raise RULES_VERSION whenever a change would give an already-scored run different numbers, and say what
changed in RULES and docs/reference/statistics.md §8.
"""

from __future__ import annotations

from regatta_shared.events.runs import AttemptFinished, Outcome, Timings

RULES_VERSION = 2

RULES: dict[int, str] = {
    1: "a sandbox fault after the agent phase began was errored (unscored)",
    2: "a sandbox fault after the agent phase began is failed (scored)",
}

# Errors that the sandbox's own state causes once the agent has run: the agent's fault, scored.
# Harbor's (error_policy.py: the agent's exits and timeouts, and the verifier's "no verdict" errors),
# and the container environment's (regatta_executor.attempt.sandbox_faults).
SANDBOX_FAULTS = frozenset(
    {
        "AgentTimeoutError",
        "NonZeroAgentExitCodeError",
        "ContextWindowExceededError",
        "ContextLengthExceededError",
        "OutputTokenExceededError",
        "OutputLengthExceededError",
        "AgentSafetyRefusalError",
        "ContentPolicyViolationError",
        "VerifierTimeoutError",
        "RewardFileNotFoundError",
        "RewardFileEmptyError",
        "VerifierOutputParseError",
        "SandboxTamperedError",
        "StorageLimitExceededError",
        "VerifierCannotRunError",
    }
)


def agent_phase_recorded(timings: Timings) -> bool:
    """Whether an attempt event shows that its agent phase ran: it timed the agent or the verifier.
    An event that timed neither keeps its outcome (no evidence the agent ever ran)."""
    return timings.agent_execution is not None or timings.verifier is not None


def outcome_under(finished: AttemptFinished, rules_version: int = RULES_VERSION) -> Outcome:
    """The attempt's outcome under `rules_version`. Executors decide by the version of their day, so a
    version-1 outcome is the recorded one; version 2 changes only attempts recorded under version 1:
    an `errored` sandbox fault after the agent phase is `failed`."""
    if (
        rules_version >= 2
        and finished.outcome == "errored"
        and finished.exception_type in SANDBOX_FAULTS
        and agent_phase_recorded(finished.timings)
    ):
        return "failed"
    return finished.outcome
