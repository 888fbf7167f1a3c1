"""Scoring conditions: what decides whether an attempt passes and how many chances it gets.

A leaderboard promises identical conditions, so a run qualifies only at its benchmark's standard conditions
(docs/benchmarks.md, "Leaderboard qualification"). Shared by scoring (which ranks) and the gateway (which
says why a run is or is not ranked), so both apply one rule.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from regatta_shared import execution_defaults as defaults

# The platform's defaults for what a benchmark cannot declare; a run that changes them changes the
# measurement.
STANDARD_TIMEOUT_MULTIPLIER = defaults.TIMEOUT_MULTIPLIER
STANDARD_MAX_RETRIES = defaults.MAX_RETRIES
# events/integrity.py's VerifierIntegrity, spelled out here: the events package imports this module, so
# this module cannot import it (tests/unit/test_execution_defaults.py holds the two to the same values).
VerifierIntegrityPolicy = Literal["record", "enforce"]
LABELS = {
    "pass_threshold": "pass threshold",
    "primary_reward_key": "primary reward key",
    "timeout_multiplier": "timeout multiplier",
    "max_retries": "retries",
    "verifier_integrity": "verifier integrity",
}


class ScoringConditions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    pass_threshold: float = defaults.PASS_THRESHOLD
    primary_reward_key: str | None = None
    timeout_multiplier: float = STANDARD_TIMEOUT_MULTIPLIER
    max_retries: int = STANDARD_MAX_RETRIES
    # What the platform does about what the agent left for the verifier: under `enforce` an attempt can
    # fail where under `record` it would pass, so the two are different measurements.
    verifier_integrity: VerifierIntegrityPolicy = defaults.VERIFIER_INTEGRITY

    def key(self) -> tuple[Any, ...]:
        """Part of a ranking group's key: runs under different conditions never share a group."""
        return (
            self.pass_threshold,
            self.primary_reward_key,
            self.timeout_multiplier,
            self.max_retries,
            self.verifier_integrity,
        )


def standard_conditions(
    pass_threshold: float | None, primary_reward_key: str | None, verifier_integrity: str | None = None
) -> ScoringConditions:
    """A benchmark's standard conditions from its metadata (threshold, reward key, integrity policy) and
    the platform's."""
    return ScoringConditions(
        pass_threshold=defaults.PASS_THRESHOLD if pass_threshold is None else float(pass_threshold),
        primary_reward_key=primary_reward_key,
        verifier_integrity=verifier_integrity or defaults.VERIFIER_INTEGRITY,
    )


def benchmark_standard(metadata: dict[str, Any]) -> ScoringConditions:
    """The standard conditions of a benchmark from its stored metadata (BenchmarkMetadata as a dict)."""
    return standard_conditions(
        metadata.get("pass_threshold"), metadata.get("primary_reward_key"), metadata.get("verifier_integrity")
    )


def run_conditions(execution: dict[str, Any], primary_reward_key: str | None) -> ScoringConditions:
    """The conditions a run was scored under, from its locked `execution` settings (RunSubmitted)."""
    threshold = execution.get("pass_threshold")
    return ScoringConditions(
        pass_threshold=defaults.PASS_THRESHOLD if threshold is None else float(threshold),
        primary_reward_key=primary_reward_key,
        timeout_multiplier=float(execution.get("timeout_multiplier", STANDARD_TIMEOUT_MULTIPLIER)),
        max_retries=int(execution.get("max_retries", STANDARD_MAX_RETRIES)),
        # Runs recorded before the policy existed ran under Harbor's semantics: `record`.
        verifier_integrity=execution.get("verifier_integrity") or defaults.VERIFIER_INTEGRITY,
    )


def differences(run: ScoringConditions, standard: ScoringConditions) -> list[dict[str, Any]]:
    """Each condition where the run departs from the standard: field, label, the run's and standard value."""
    found = []
    for field, label in LABELS.items():
        used, expected = getattr(run, field), getattr(standard, field)
        if used != expected:
            found.append({"field": field, "label": label, "run": used, "standard": expected})
    return found


def describe(difference: dict[str, Any]) -> str:
    """One difference in words, for pages and error-free API reasons."""
    return (
        f"{difference['label']} {_value(difference['run'])} differs from the benchmark's "
        f"{_value(difference['standard'])}"
    )


def _value(value: Any) -> str:
    return "(none)" if value is None else (f"{value:g}" if isinstance(value, float) else str(value))


# Runs recorded before RunSubmitted carried the benchmark's recommended set keep the rule they were
# submitted under: a set named `parity` ranked.
_LEGACY_RANKED_SET = "parity"


def ranked_task_set(submission: dict[str, Any]) -> str | None:
    """The one named task set that ranks like the full list: the benchmark's recommended set when the run
    was submitted (its manifest's `recommended`), whatever it is called."""
    if "recommended_task_set" in submission:
        return submission["recommended_task_set"]
    return _LEGACY_RANKED_SET


SCRATCH_REASON = "a run of a scratch benchmark (uploaded tasks, `regatta task try`) never ranks"


def selection_reason(selection: dict[str, Any], recommended: str | None) -> str | None:
    """Why a run's task selection keeps it off the leaderboard (statistics.md §6), or None."""
    if selection.get("task_names") or selection.get("categories"):
        return "a category- or task-name-filtered run never ranks"
    task_set = selection.get("task_set")
    if task_set and task_set != recommended:
        if recommended is None:
            return f"task set {task_set!r} is not the full task list (this benchmark recommends no set)"
        return f"task set {task_set!r} is neither the full task list nor the recommended set {recommended!r}"
    return None


def qualification(submission: dict[str, Any]) -> dict[str, Any]:
    """Whether a run may rank, from its RunSubmitted payload: the conditions it used, the benchmark's
    standard ones, each difference, and every reason it does not qualify (none: it ranks once finished
    with every attempt scored)."""
    primary = submission.get("primary_reward_key")
    used = run_conditions(submission.get("execution") or {}, primary)
    recorded = submission.get("standard_conditions")
    standard = ScoringConditions.model_validate(recorded) if recorded else standard_conditions(None, primary)
    found = differences(used, standard)
    reasons = [describe(d) for d in found]
    selection = selection_reason(submission.get("selection") or {}, ranked_task_set(submission))
    if selection:
        reasons.append(selection)
    if submission.get("scratch"):
        reasons.append(SCRATCH_REASON)
    return {
        "qualifies": not reasons,
        "conditions": used.model_dump(),
        "standard_conditions": standard.model_dump(),
        "standard": not found,
        "differences": found,
        "reasons": reasons,
    }
