"""Which of a task's `${VAR}` the executor refuses before a trial, and what Harbor's own resolution
reads once scrubbed (task_variables.py; the attack itself, in real sandboxes:
tests/integration/executor/test_task_variables.py)."""

from __future__ import annotations

import harbor.utils.env as harbor_env
import pytest
from harbor.models.task.config import TaskConfig
from regatta_executor.tasks.environment import TaskEnvironmentError
from regatta_executor.tasks.variables import (
    check_task_variables,
    resolve_task_env,
    scrub_harbor_environment,
    unfilled_variables,
)


def _config(toml: str) -> TaskConfig:
    return TaskConfig.model_validate_toml(toml)


def _unfilled(
    toml: str, agent_env: tuple[str, ...] = (), verifier_env: tuple[str, ...] = (), oracle: bool = True
):
    return unfilled_variables(_config(toml), agent_env=agent_env, verifier_env=verifier_env, oracle=oracle)


def test_harbors_resolution_reads_nothing_of_this_process_once_scrubbed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("REGATTA_TEST_CANARY", "hunter2")
    scrub_harbor_environment()
    scrub_harbor_environment()  # idempotent
    assert harbor_env.resolve_env_vars({"A": "${REGATTA_TEST_CANARY:-d}", "B": "lit"}) == {
        "A": "d",
        "B": "lit",
    }
    with pytest.raises(ValueError, match="REGATTA_TEST_CANARY"):
        harbor_env.resolve_env_vars({"A": "${REGATTA_TEST_CANARY}"})
    assert resolve_task_env({"A": "${PATH:-none}"}) == {"A": "none"}
    assert harbor_env.os.path is __import__("os").path, "the rest of `os` is the real module"


def test_a_reference_without_a_default_is_refused_naming_field_and_variable() -> None:
    reasons = _unfilled(
        "[environment.env]\nLEAK = '${REGATTA_MASTER_KEY}'\nFINE = '${X:-d}'\nLIT = 'a ${Y}'\n"
    )
    assert len(reasons) == 1, reasons
    assert reasons[0].startswith("task.toml [environment].env LEAK = '${REGATTA_MASTER_KEY}': ")
    assert "has no default" in reasons[0]


def test_the_runs_verifier_secret_of_the_same_name_replaces_the_entry() -> None:
    toml = "[verifier.env]\nOPENAI_API_KEY = '${OPENAI_API_KEY}'\nJUDGE = '${OPENAI_API_KEY}'\n"
    reasons = _unfilled(toml, verifier_env=("OPENAI_API_KEY",))
    assert [r.split(":", 1)[0] for r in reasons] == ["task.toml [verifier].env JUDGE = '${OPENAI_API_KEY}'"]
    assert "a secret named JUDGE" in reasons[0]
    # The agent's env never fills the verifier's.
    assert len(_unfilled(toml, agent_env=("OPENAI_API_KEY",))) == 2


def test_solution_env_counts_only_for_the_oracle() -> None:
    toml = "[solution.env]\nS = '${SECRET}'\n"
    assert _unfilled(toml, oracle=True)[0].startswith("task.toml [solution].env S = '${SECRET}'")
    assert _unfilled(toml, oracle=False) == []


def test_steps_and_verifier_environments_are_named() -> None:
    toml = """
    [[steps]]
    name = "first"
    [steps.verifier.env]
    V = "${A}"
    [steps.verifier.environment.env]
    W = "${B}"
    """
    reasons = _unfilled(toml)
    assert [r.split(":", 1)[0] for r in reasons] == [
        "task.toml [verifier] of step 'first' env V = '${A}'",
        "task.toml [verifier.environment] of step 'first' env W = '${B}'",
    ]


def test_mcp_headers_are_filled_from_the_runs_agent_env_only() -> None:
    toml = """
    [[environment.mcp_servers]]
    name = "tools"
    transport = "streamable-http"
    url = "http://tools.invalid/mcp"
    headers = { Authorization = "Bearer ${TOKEN}", X-Trace = "${TRACE:-off}" }
    """
    assert _unfilled(toml, agent_env=("TOKEN", "TRACE")) == []
    reasons = _unfilled(toml, agent_env=("TOKEN",))
    # A default does not help: Harbor would look in the executor's environment before using it.
    assert reasons == [
        "task.toml [environment].mcp_servers 'tools' header 'X-Trace': ${TRACE} is filled only from "
        "the run's env and secrets (never the executor's environment), and the run gives the agent none "
        "named TRACE"
    ]


def test_unusual_names_are_not_repeated_and_many_reasons_are_cut() -> None:
    odd = "[environment.env]\nK = '${A B}'\n"
    assert "(an unusual name)" in _unfilled(odd)[0] and "A B" not in _unfilled(odd)[0]
    many = "[environment.env]\n" + "".join(f"K{i} = '${{V{i}}}'\n" for i in range(8))
    config = {"agent": {"name": "nop", "env": {}}, "verifier": {"env": {}}}
    with pytest.raises(TaskEnvironmentError) as refused:
        check_task_variables(_config(many), config)
    assert str(refused.value).count("task.toml") == 5 and str(refused.value).endswith("; and 3 more")
