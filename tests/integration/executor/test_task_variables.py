"""A task's `${VAR}` reads nothing of the executor's environment (task_variables.py), under `local`
(real bubblewrap) and `container` (a real Docker engine).

The attack: a task whose `[environment].env`, `[verifier].env`, `[solution].env` or MCP headers name a
variable of the executor's process (REGATTA_MASTER_KEY, the NATS URL with its password), which Harbor
fills from its host's environment. This test process is the executor's: the variables are set in it.
- Without a default, the attempt's job ends `errored` once, naming the field and the variable, and
  nothing of the attempt is made.
- With a default (which the check lets through), every command of the agent, the oracle and the
  verifier sees the default, and no file of the trial holds a value of the executor's environment.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
from regatta_executor.attempt.trials import run_trial, trial_config
from regatta_shared.events import AgentSpec, ModelSpec
from regatta_shared.messaging.jobs import AttemptJob

from tests.integration.container_support import write_task
from tests.integration.executor_jobs import ENVIRONMENTS, containers_left, environment_choice, run_job

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("built_images_removed")]

CANARY = "REGATTA_TEST_CANARY"


@pytest.fixture
def executor_secrets(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Values only the executor's own environment holds."""
    values = {CANARY: f"canary-{secrets.token_hex(16)}", "REGATTA_MASTER_KEY": secrets.token_urlsafe(32)}
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return values


def _task(parent: Path, name: str, tables: str) -> Path:
    """A task whose commands write their whole environment where the trial brings it back."""
    task = write_task(
        parent,
        name,
        solve="env > /logs/agent/solve-env.txt\n",
        test="env > /logs/verifier/test-env.txt\necho 1 > /logs/verifier/reward.txt\n",
    )
    toml = task / "task.toml"
    toml.write_text(toml.read_text() + tables)
    return task


REFERENCES = {
    "environment.env": ("[environment.env]\nLEAK = '${%s}'\n", "task.toml [environment].env LEAK = '${%s}'"),
    "verifier.env": ("[verifier.env]\nLEAK = '${%s}'\n", "task.toml [verifier].env LEAK = '${%s}'"),
    "solution.env": ("[solution.env]\nLEAK = '${%s}'\n", "task.toml [solution].env LEAK = '${%s}'"),
    "mcp headers": (
        "[[environment.mcp_servers]]\nname = 'tools'\ntransport = 'streamable-http'\n"
        "url = 'http://tools.invalid/mcp'\nheaders = { Authorization = 'Bearer ${%s}' }\n",
        "task.toml [environment].mcp_servers 'tools' header 'Authorization': ${%s} is filled only from "
        "the run's env and secrets",
    ),
}


@pytest.mark.parametrize("variable", [CANARY, "REGATTA_MASTER_KEY"])
@pytest.mark.parametrize("field", list(REFERENCES))
@pytest.mark.parametrize("kind", ENVIRONMENTS)
async def test_a_reference_to_the_executors_environment_ends_the_attempt_errored_naming_it(
    nats_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    executor_secrets: dict[str, str],
    kind: str,
    field: str,
    variable: str,
) -> None:
    table, said = REFERENCES[field]
    task = _task(tmp_path / "tasks", f"leak-{secrets.token_hex(4)}", table % variable)
    done = await run_job(nats_url, tmp_path, environment_choice(kind, tmp_path, monkeypatch), task)

    assert [(r.outcome, r.delivery, r.try_number) for r in done.finished] == [("errored", 1, 1)], done.reports
    (report,) = done.finished
    assert report.exception_type == "TaskEnvironmentError"
    assert (said % variable) in (report.exception_message or ""), report.exception_message
    assert "retrying" not in [r.kind for r in done.reports], "not retried"
    for value in executor_secrets.values():
        assert value not in report.model_dump_json()
    assert containers_left(kind, done.job) == []


DEFAULTS = f"""
[environment.env]
SEEN_ENV = '${{{CANARY}:-env-default}}'
SEEN_KEY = '${{REGATTA_MASTER_KEY:-key-default}}'

[verifier.env]
SEEN_VERIFIER = '${{{CANARY}:-verifier-default}}'

[solution.env]
SEEN_SOLUTION = '${{{CANARY}:-solution-default}}'
"""


def _variables(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if line.startswith("SEEN_"))


@pytest.mark.parametrize("kind", ENVIRONMENTS)
async def test_a_default_is_all_a_task_gets_of_the_executors_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, executor_secrets: dict[str, str], kind: str
) -> None:
    """Harbor itself fills these (the check lets a default through): only its resolution's scrubbed
    view of the environment stands between the task and the values."""
    task = _task(tmp_path / "tasks", f"defaults-{kind}", DEFAULTS)
    job = AttemptJob(
        run_id="run-variables",
        attempt_id=f"att-variables-{kind}-{secrets.token_hex(4)}",
        agent=AgentSpec(index=0, harness="oracle", model=ModelSpec(type="hosted", base_model="none")),
        task=task.name,
        task_digest="sha256:test",
        attempt_index=0,
    )
    environment = environment_choice(kind, tmp_path, monkeypatch)
    result = await run_trial(trial_config(job, task, tmp_path / "trials", environment, {}))
    assert result["verifier_result"]["rewards"] == {"reward": 1}, result.get("exception_info")

    trial = tmp_path / "trials" / job.attempt_id
    assert _variables(trial / "agent" / "solve-env.txt") == {
        "SEEN_ENV": "env-default",
        "SEEN_KEY": "key-default",
        "SEEN_SOLUTION": "solution-default",
    }
    assert _variables(trial / "verifier" / "test-env.txt") == {
        "SEEN_ENV": "env-default",
        "SEEN_KEY": "key-default",
        "SEEN_VERIFIER": "verifier-default",
    }
    files = [path for path in trial.rglob("*") if path.is_file() and not path.is_symlink()]
    assert len(files) >= 3, files
    for path in files:
        content = path.read_bytes()
        for name, value in executor_secrets.items():
            assert value.encode() not in content, f"{name}'s value is in {path.relative_to(trial)}"
