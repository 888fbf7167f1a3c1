"""Issue 28, item 1b: an agent whose install fails is reported by a short reason (its command and the
last lines that say why), while the whole output stays in the attempt's `exception.txt` artifact.

Real parts: the aider harness's own install (it needs curl, so Harbor runs apt-get) in a container of
the `container` environment on a task without a network, so apt can fetch nothing and the install
fails the way it does on a deployment whose mirror is unreachable."""

from __future__ import annotations

import shutil
from pathlib import Path

import docker
import pytest
from regatta_executor.attempt import artifacts
from regatta_executor.attempt.outcome import classify
from regatta_executor.attempt.reasons import FULL_LOG, LIMIT, short_reason
from regatta_executor.attempt.trials import EnvironmentChoice, run_trial, trial_config
from regatta_executor.container.engine import CONTAINER_ENVIRONMENT
from regatta_shared.events import AgentSpec, ModelSpec
from regatta_shared.messaging.jobs import AttemptJob

from tests.conftest import EXAMPLES
from tests.integration.container_support import LOCAL_IMAGES

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("built_images_removed")]


async def test_a_failed_install_is_a_short_reason_with_the_full_output_as_an_artifact(
    engine: docker.DockerClient, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    task = tmp_path / "tasks" / "offline"
    shutil.copytree(EXAMPLES / "tasks" / "hello-file", task)
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace('network_mode = "public"', 'network_mode = "no-network"'))
    job = AttemptJob(
        run_id="run-install",
        attempt_id="att-install-fails",
        agent=AgentSpec(
            index=0,
            harness="aider",
            model=ModelSpec(type="endpoint", model="gpt-4o-mini", base_url="http://127.0.0.1:9/v1"),
        ),
        task="offline",
        task_digest="sha256:test",
        attempt_index=0,
    )
    environment = EnvironmentChoice(
        CONTAINER_ENVIRONMENT, {"state_dir": str(tmp_path / "state"), "local_images": LOCAL_IMAGES}
    )
    result = await run_trial(trial_config(job, task, tmp_path / "trials", environment, {}))

    outcome = classify(result, 1.0)
    assert outcome.outcome == "errored"
    full = outcome.exception_message or ""
    assert "apt-get update && apt-get install" in full, full
    reason = short_reason(full)
    assert reason is not None and len(reason) <= LIMIT < len(full), (len(full), reason)
    assert reason.startswith("Command failed (exit "), reason
    # The last thing apt said is why the install failed; it is kept, and named once.
    assert "Unable to locate package curl" in reason, reason
    assert reason.count("Unable to locate package curl") == 1, reason
    assert FULL_LOG in reason

    stored = dict(artifacts.collect(tmp_path / "trials" / job.attempt_id))
    assert FULL_LOG in stored, sorted(stored)
    log = stored[FULL_LOG].decode()
    assert "Unable to locate package curl" in log
    assert full.splitlines()[-1].strip() in log, "the artifact holds the whole message"
