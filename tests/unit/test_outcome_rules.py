"""The outcome rule of docs/reference/statistics.md §1, on Harbor trial results as the executor gets
them: "once the agent phase has begun, a verifier that cannot run or conclude because of the
sandbox's state scores the attempt `failed`; only faults outside the sandbox (engine, network,
provider, the platform itself) are `errored`"."""

from __future__ import annotations

from typing import Any

import pytest
from harbor.models.trial.error_policy import ERROR_POLICIES
from regatta_executor.attempt import sandbox_faults
from regatta_executor.attempt.outcome import SANDBOX_FAULTS, classify
from regatta_executor.attempt.runner import REFUSALS, retryable

AGENT_RAN = {"started_at": "2026-12-01T10:00:00Z", "finished_at": "2026-12-01T10:00:05Z"}


def result(exception_type: str | None, *, agent_ran: bool = True, rewards: Any = None) -> dict[str, Any]:
    exception = None
    if exception_type is not None:
        exception = {
            "exception_type": exception_type,
            "exception_message": f"{exception_type}: the reason",
            "policy": {"should_retry": ERROR_POLICIES[exception_type].should_retry}
            if exception_type in ERROR_POLICIES
            else {"should_retry": True},
        }
    return {
        "exception_info": exception,
        "verifier_result": {"rewards": rewards} if rewards is not None else None,
        "agent_execution": AGENT_RAN if agent_ran else None,
    }


@pytest.mark.parametrize(
    "exception_type",
    [
        "AgentTimeoutError",  # a fork bomb, or an agent that never ends, and then no reward
        "VerifierTimeoutError",
        "RewardFileNotFoundError",  # the shell the test needs is gone
        "RewardFileEmptyError",
        "VerifierOutputParseError",
        "SandboxTamperedError",
        "StorageLimitExceededError",
        "VerifierCannotRunError",  # the step before the verifier found no shell
    ],
)
def test_a_verifier_without_a_verdict_after_the_agent_ran_is_the_agents_failure(exception_type: str) -> None:
    outcome = classify(result(exception_type), pass_threshold=1.0)
    assert (outcome.outcome, outcome.retryable) == ("failed", False)
    assert outcome.primary_reward is None and outcome.rewards is None
    assert outcome.exception_type == exception_type
    assert outcome.exception_message == f"{exception_type}: the reason", "the reason is shown"


@pytest.mark.parametrize(
    "exception_type",
    [
        "APIError",  # the engine's (docker.errors) and litellm's share the name
        "ApiConnectionError",
        "RateLimitError",
        "AuthenticationError",
        "SandboxBuildFailedError",
        "EnvironmentStartTimeoutError",
        "DockerException",
        "ConnectionError",
        "KeyError",  # a bug of the platform's own
    ],
)
def test_faults_outside_the_sandbox_stay_errored(exception_type: str) -> None:
    assert classify(result(exception_type), pass_threshold=1.0).outcome == "errored"


@pytest.mark.parametrize("exception_type", sorted(SANDBOX_FAULTS))
def test_before_the_agent_phase_no_fault_is_the_agents(exception_type: str) -> None:
    """The agent never ran, so nothing of the sandbox's state is its doing."""
    assert classify(result(exception_type, agent_ran=False), pass_threshold=1.0).outcome == "errored"


def test_a_valid_reward_is_scored_whatever_the_error() -> None:
    outcome = classify(result("AgentTimeoutError", rewards={"reward": 1.0}), pass_threshold=1.0)
    assert (outcome.outcome, outcome.primary_reward) == ("passed", 1.0)


def test_cancelled_stays_cancelled() -> None:
    assert classify(result("CancelledError"), pass_threshold=1.0).outcome == "cancelled"


def test_the_platforms_own_sandbox_faults_are_named_in_the_rule() -> None:
    """Harbor records an exception by its class name: every sandbox fault class must be in the set."""
    classes = [c for c in vars(sandbox_faults).values() if isinstance(c, type) and issubclass(c, Exception)]
    leaves = {c.__name__ for c in classes if c is not sandbox_faults.SandboxFaultError}
    assert leaves and leaves <= SANDBOX_FAULTS
    # Harbor's own verdict-less verifier errors are in it too, and none of its infrastructure ones.
    infrastructure = {name for name, p in ERROR_POLICIES.items() if p.should_retry}
    assert not SANDBOX_FAULTS & infrastructure


@pytest.mark.parametrize("refusal", sorted(REFUSALS))
def test_the_platforms_refusals_of_a_task_are_errored_and_never_retried(refusal: str) -> None:
    """Decided from the task's own files, they would be refused again on every try (a transient
    fault of the engine is retried as before)."""
    refused = classify(result(refusal, agent_ran=False), pass_threshold=1.0)
    assert refused.outcome == "errored" and not retryable(refused)
    transient = classify(result("DockerException", agent_ran=False), pass_threshold=1.0)
    assert transient.outcome == "errored" and retryable(transient)


def test_the_refusals_named_are_the_platforms_exception_classes() -> None:
    from regatta_executor.container.compose import files as compose_files
    from regatta_executor.container.image import build_context, dockerfile_policy, references

    classes = {
        references.ImageRefusedError,
        dockerfile_policy.DockerfileRefusedError,
        compose_files.ComposeError,
        build_context.BuildContextError,
    }
    assert {c.__name__ for c in classes} == REFUSALS
