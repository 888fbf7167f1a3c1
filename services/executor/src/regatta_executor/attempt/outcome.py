"""How a Harbor trial result becomes Regatta's attempt outcome (statistics.md §1; harbor.md §3.4).

Pure: takes the trial's result as a plain dict (TrialResult JSON), decides nothing else.

The rule that keeps an agent from turning its failure into no score: once the agent phase has begun,
an attempt without a valid reward is `failed` unless its error is a fault outside the sandbox
(engine, network, model provider, the platform itself), which alone is `errored` (and retried). An
agent that breaks its sandbox (deletes the shell, fills the disk, exhausts pids, outlasts the
verifier, tampers with the image's executables) would otherwise raise the run's pass rate by
leaving its attempt unscored.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from regatta_shared.events import Outcome, Timings, Usage
from regatta_shared.rules.scoring_rules import SANDBOX_FAULTS  # versioned rules, also applied by scoring
from regatta_shared.rules.task_defects import is_task_defect

from .redaction import Redactor


@dataclass(frozen=True)
class TrialOutcome:
    outcome: Outcome
    retryable: bool
    rewards: dict[str, float] | None
    primary_reward: float | None
    exception_type: str | None
    exception_message: str | None
    started_at: str | None
    finished_at: str | None
    timings: Timings
    usage: Usage
    # Why no attempt of the run can succeed, when this attempt's error says so (worker.py).
    run_failure: str | None = None


def primary_reward(rewards: dict[str, float], primary_key: str | None = None) -> float:
    """`reward` if present (or the benchmark's named key); else the only key; else the mean of all keys."""
    if primary_key and primary_key in rewards:
        return float(rewards[primary_key])
    if "reward" in rewards:
        return float(rewards["reward"])
    values = [float(v) for v in rewards.values()]
    return values[0] if len(values) == 1 else sum(values) / len(values)


def agent_phase_began(result: dict[str, Any]) -> bool:
    return bool((result.get("agent_execution") or {}).get("started_at"))


def sandbox_fault(result: dict[str, Any]) -> bool:
    """Whether the attempt's error is one the agent's sandbox caused after the agent had run."""
    exception = result.get("exception_info") or {}
    return agent_phase_began(result) and exception.get("exception_type") in SANDBOX_FAULTS


def _seconds(timing: dict[str, Any] | None) -> float | None:
    if not timing or not timing.get("started_at") or not timing.get("finished_at"):
        return None
    start = datetime.fromisoformat(str(timing["started_at"]).replace("Z", "+00:00"))
    end = datetime.fromisoformat(str(timing["finished_at"]).replace("Z", "+00:00"))
    return (end - start).total_seconds()


def classify(result: dict[str, Any], pass_threshold: float, primary_key: str | None = None) -> TrialOutcome:
    exception = result.get("exception_info") or None
    policy = (exception or {}).get("policy") or {}
    verifier = result.get("verifier_result") or {}
    rewards = verifier.get("rewards") or None
    valid = bool(result.get("reward_valid")) if "reward_valid" in result else bool(rewards)
    agent = result.get("agent_result") or {}
    usage = Usage(
        input_tokens=agent.get("n_input_tokens"),
        output_tokens=agent.get("n_output_tokens"),
        cache_tokens=agent.get("n_cache_tokens"),
        cost_usd=agent.get("cost_usd"),
    )
    timings = Timings(
        environment_setup=_seconds(result.get("environment_setup")),
        agent_setup=_seconds(result.get("agent_setup")),
        agent_execution=_seconds(result.get("agent_execution")),
        verifier=_seconds(result.get("verifier")),
        total=_seconds({"started_at": result.get("started_at"), "finished_at": result.get("finished_at")}),
    )
    primary: float | None = None
    if valid and rewards:
        primary = primary_reward(rewards, primary_key)
        outcome: Outcome = "passed" if primary >= pass_threshold else "failed"
    elif exception and exception.get("exception_type") == "CancelledError":
        outcome = "cancelled"
    elif sandbox_fault(result):
        outcome = "failed"
    else:
        outcome = "errored"
    return TrialOutcome(
        outcome=outcome,
        # Only infrastructure/API faults are retried; an agent's own fault is scored (invariant 5), and
        # a task's own defect fails the same way on every try (regatta_shared.rules.task_defects).
        retryable=outcome == "errored"
        and not is_task_defect((exception or {}).get("exception_type"))
        and bool(policy.get("should_retry", exception is not None)),
        rewards={k: float(v) for k, v in rewards.items()} if rewards else None,
        primary_reward=primary,
        exception_type=(exception or {}).get("exception_type"),
        exception_message=(exception or {}).get("exception_message"),
        started_at=_iso(result.get("started_at")),
        finished_at=_iso(result.get("finished_at")),
        timings=timings,
        usage=usage,
    )


def _iso(value: Any) -> str | None:
    return None if value is None else str(value)


def redact(text: str | None, secrets: dict[str, str]) -> str | None:
    """`text` with every form of every secret value replaced (regatta_executor.attempt.redaction): reports
    and artifacts never carry a secret."""
    return Redactor(secrets.values()).text(text)
