"""terminus-2 against a scripted OpenAI-compatible server (a test double of a paid provider), in the `local`
environment, through the executor's own trial configuration: model name, base URL, harness defaults,
the API key from the run's secrets, token and cost accounting, and redaction of secrets from artifacts."""

from __future__ import annotations

import os
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest
from regatta_executor.attempt.artifacts import collect, redact_bytes
from regatta_executor.attempt.outcome import classify
from regatta_executor.attempt.trials import EnvironmentChoice, run_trial, trial_config
from regatta_shared.events import AgentSpec, ModelSpec
from regatta_shared.messaging.jobs import AttemptJob

from tests.conftest import EXAMPLES, unavailable
from tests.integration.local_environment_support import sandboxes_dir
from tests.support.scripted_llm import ScriptedLLM, terminus_reply

# The machine is offline: litellm must price models from its bundled table, not fetch one.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HARBOR_TELEMETRY", "0")

pytestmark = pytest.mark.timeout(180)

API_KEY = "sk-scripted-" + "7f3a9c1e5b2d4f60"
# litellm's bundled prices for gpt-4o-mini (USD per token).
INPUT_PRICE, OUTPUT_PRICE = 0.15e-6, 0.6e-6


@pytest.fixture(autouse=True)
def _sandbox_host() -> None:
    if os.geteuid() != 0 or not all(shutil.which(tool) for tool in ("bwrap", "tmux", "python3")):
        unavailable("terminus-2 in the local environment needs root, bubblewrap, tmux and python3")


def job(
    harness: str, model: ModelSpec, *, verifier_env_names: list[str] | None = None, task: str = "hello-file"
) -> AttemptJob:
    return AttemptJob(
        run_id="run-t2",
        attempt_id=f"att-{harness}",
        agent=AgentSpec(index=0, harness=harness, model=model),
        task=task,
        task_digest="sha256:test",
        attempt_index=0,
        verifier_env_names=verifier_env_names or [],
    )


async def run(job: AttemptJob, task_dir: Path, work: Path, secrets: dict[str, str]) -> dict[str, Any]:
    environment = EnvironmentChoice("local", {"sandbox_dir": str(sandboxes_dir(work))})
    config = trial_config(job, task_dir, work / "trials", environment, secrets)
    return await run_trial(config)


def uploaded(trial_dir: Path, secrets: dict[str, str]) -> dict[str, bytes]:
    """What artifacts.upload would store: every collected file, secrets redacted."""
    return {path: redact_bytes(data, list(secrets.values()), path) for path, data in collect(trial_dir)}


def hello_file(tmp_path: Path) -> Path:
    """The example task with room for litellm's first call on a loaded machine (its agent timeout is 60 s)."""
    task = tmp_path / "tasks" / "hello-file"
    shutil.copytree(EXAMPLES / "tasks" / "hello-file", task)
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace("timeout_sec = 60", "timeout_sec = 300"))
    return task


async def test_terminus2_solves_a_task_against_a_scripted_endpoint(tmp_path: Path) -> None:
    task = hello_file(tmp_path)
    script = [
        terminus_reply(["printf 'Hello, Regatta!\\n' > /app/hello.txt\n", "cat /app/hello.txt\n"]),
        terminus_reply(task_complete=True, analysis="The file is written."),
        terminus_reply(task_complete=True, analysis="Confirmed."),
    ]
    endpoint = ModelSpec(type="endpoint", model="gpt-4o-mini", api_key_secret="SCRIPTED_KEY")
    secrets = {"SCRIPTED_KEY": API_KEY}
    with ScriptedLLM(script, prompt_tokens=1000, completion_tokens=50) as llm:
        endpoint = endpoint.model_copy(update={"base_url": llm.base_url})
        attempt = job("terminus-2", endpoint)
        config = trial_config(attempt, task, tmp_path / "trials", EnvironmentChoice(), secrets)
        assert config["agent"]["model_name"] == "openai/gpt-4o-mini"
        assert config["agent"]["base_url"] == llm.base_url
        assert config["agent"]["kwargs"] == {"record_terminal_session": False}
        assert config["agent"]["env"]["OPENAI_API_KEY"] == API_KEY

        result = await run(attempt, task, tmp_path, secrets)
        calls = llm.calls

    exception = result.get("exception_info") or {}
    assert exception.get("exception_type") is None, exception.get("exception_message")
    assert result["verifier_result"]["rewards"] == {"reward": 1.0}
    assert calls == 3
    assert set(llm.authorizations) == {f"Bearer {API_KEY}"}, "the run's secret reached the provider"

    agent = result["agent_result"]
    assert (agent["n_input_tokens"], agent["n_output_tokens"]) == (3 * 1000, 3 * 50)
    expected_cost = 3 * (1000 * INPUT_PRICE + 50 * OUTPUT_PRICE)
    assert agent["cost_usd"] == pytest.approx(expected_cost, rel=1e-6)

    outcome = classify(result, pass_threshold=1.0)
    assert outcome.outcome == "passed"
    assert (outcome.usage.input_tokens, outcome.usage.output_tokens) == (3000, 150)
    assert outcome.usage.cost_usd == pytest.approx(expected_cost, rel=1e-6)

    files = uploaded(tmp_path / "trials" / attempt.attempt_id, secrets)
    assert any(path.startswith("agent/") for path in files), sorted(files)
    assert not [path for path, data in files.items() if API_KEY.encode() in data]


async def test_verifier_gets_only_its_secrets_and_artifacts_never_show_them(tmp_path: Path) -> None:
    task = tmp_path / "tasks" / "verifier-secret"
    for sub in ("environment", "tests", "solution"):
        (task / sub).mkdir(parents=True)
    (task / "task.toml").write_text("[agent]\ntimeout_sec = 30\n[verifier]\ntimeout_sec = 30\n")
    (task / "instruction.md").write_text("Nothing to do.\n")
    (task / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    (task / "solution" / "solve.sh").write_text(
        '#!/bin/bash\necho "judge=${JUDGE_TOKEN:-none} tool=${TOOL_TOKEN:-none}" > /logs/agent/env.txt\n'
    )
    (task / "tests" / "test.sh").write_text(
        textwrap.dedent("""\
            #!/bin/bash
            echo "verifier sees judge=$JUDGE_TOKEN"
            [ "$JUDGE_TOKEN" = "judge-secret-value" ] && echo 1 > /logs/verifier/reward.txt \\
                || echo 0 > /logs/verifier/reward.txt
        """)
    )
    secrets = {"JUDGE_TOKEN": "judge-secret-value", "TOOL_TOKEN": "tool-secret-value"}
    attempt = job("oracle", ModelSpec(type="hosted", base_model="none"), verifier_env_names=["JUDGE_TOKEN"])

    result = await run(attempt, task, tmp_path, secrets)

    assert result["verifier_result"]["rewards"] == {"reward": 1.0}, "the verifier got its secret"
    trial_dir = tmp_path / "trials" / attempt.attempt_id
    assert "judge-secret-value" not in (trial_dir / "agent" / "env.txt").read_text(), "verifier-only"
    # Harbor masks verifier env values in test-stdout.txt itself; anything else is redacted on upload.
    (trial_dir / "agent" / "leak.txt").write_text("judge-secret-value tool-secret-value\n")
    files = uploaded(trial_dir, secrets)
    assert files["agent/leak.txt"] == b"[REDACTED] [REDACTED]\n"
    for path, data in files.items():
        assert b"judge-secret-value" not in data and b"tool-secret-value" not in data, path
