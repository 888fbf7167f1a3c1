"""What the executor hands the container environment per attempt and per process: the attempt's run
(so a failed build is not repeated within it) and the deployment's local images and outbound policy."""

from __future__ import annotations

from pathlib import Path

import pytest
from regatta_executor.app import choose_environment
from regatta_executor.attempt.trials import trial_config
from regatta_executor.container.options import ContainerEnvironmentOptions
from regatta_executor.environments.choice import CONTAINER_ENVIRONMENT, EnvironmentChoice
from regatta_shared.events import AgentSpec, ModelSpec
from regatta_shared.messaging.jobs import AttemptJob
from regatta_shared.settings import Settings


def job() -> AttemptJob:
    return AttemptJob(
        run_id="run-7",
        attempt_id="att-1",
        agent=AgentSpec(index=0, harness="oracle", model=ModelSpec(type="hosted", base_model="none")),
        task="t",
        task_digest="sha256:x",
        attempt_index=0,
    )


@pytest.mark.parametrize(
    ("kind", "run_id"), [("container", "run-7"), (CONTAINER_ENVIRONMENT, "run-7"), ("local", None)]
)
def test_the_attempts_run_reaches_the_container_environment_only(kind: str, run_id: str | None) -> None:
    config = trial_config(job(), Path("/t"), Path("/w"), EnvironmentChoice(kind, {"a": 1}), {})
    assert config["environment"]["kwargs"].get("run_id") == run_id
    assert config["environment"]["kwargs"]["a"] == 1


@pytest.mark.parametrize("name", ["container", CONTAINER_ENVIRONMENT])
def test_the_deployments_local_images_and_outbound_policy_reach_the_container_kwargs(name: str) -> None:
    settings = Settings(
        REGATTA_EXECUTOR_ENVIRONMENT=name,
        REGATTA_EXECUTOR_ENVIRONMENT_KWARGS='{"allow_host_root": true}',
        REGATTA_LOCAL_IMAGES=" debian:12 , ghcr.io/org/base:1",
        REGATTA_OUTBOUND_ALLOW="10.1.2.3",
    )
    kwargs = choose_environment(settings).choice.kwargs
    assert kwargs["local_images"] == ["debian:12", "ghcr.io/org/base:1"]
    assert kwargs["outbound_allow"] == "10.1.2.3"
    options = ContainerEnvironmentOptions.model_validate(kwargs)
    assert options.local_images == ["debian:12", "ghcr.io/org/base:1"]


@pytest.mark.parametrize("entry", ["516c", "regatta-env:abc", "not a reference"])
def test_a_local_images_entry_that_is_no_reference_is_refused_at_start(entry: str) -> None:
    with pytest.raises(ValueError, match="local_images entry"):
        ContainerEnvironmentOptions.model_validate({"local_images": [entry]})
