"""A harness's own key (`harness_api_key_secret`) reaches the agent under the variable the harness
reads, and the catalogue users see names that same variable (one list: regatta_shared.rules.harnesses)."""

from __future__ import annotations

from regatta_executor.attempt.trials import agent_env
from regatta_shared.events import AgentSpec, ModelSpec
from regatta_shared.messaging.jobs import AttemptJob
from regatta_shared.rules.harnesses import HARNESSES


def _job(harness: str) -> AttemptJob:
    model = ModelSpec(type="provider", model="anthropic/claude-sonnet-4", api_key_secret="MODEL_KEY")
    return AttemptJob(
        run_id="r",
        attempt_id="a",
        agent=AgentSpec(index=0, harness=harness, model=model, harness_api_key_secret="HARNESS_KEY"),
        task="t",
        task_digest="sha256:t",
        attempt_index=0,
        verifier_env_names=[],
    )


def test_the_harness_key_goes_where_the_catalogue_says() -> None:
    secrets = {"MODEL_KEY": "model-secret", "HARNESS_KEY": "harness-secret"}
    env = agent_env(_job("claude-code"), secrets)
    assert HARNESSES["claude-code"]["keys"] == ["ANTHROPIC_API_KEY"]
    assert env["ANTHROPIC_API_KEY"] == "harness-secret"
    codex = agent_env(_job("codex"), secrets)
    assert codex["OPENAI_API_KEY"] == "harness-secret"
    assert HARNESSES["codex"]["keys"] == ["OPENAI_API_KEY"]


def test_a_harness_without_a_key_of_its_own_gets_only_the_model_key() -> None:
    env = agent_env(_job("terminus-2"), {"MODEL_KEY": "model-secret", "HARNESS_KEY": "harness-secret"})
    assert env["ANTHROPIC_API_KEY"] == "model-secret"
