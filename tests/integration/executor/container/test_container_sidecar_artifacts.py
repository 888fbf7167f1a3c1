"""A compose task's sidecar evidence on a real Docker engine: `[[artifacts]]` of a sidecar and a
`[[verifier.collect]]` hook run in it come back with the attempt's artifacts, through the executor's own
trial path (Harbor collects them only from an environment that declares `docker_compose`, which
`container` does: it runs the sidecars and serves their per-service operations)."""

from __future__ import annotations

import secrets
from pathlib import Path

import docker
import pytest
import yaml
from regatta_executor.attempt import artifacts
from regatta_executor.attempt.trials import run_trial, trial_config
from regatta_executor.environments.choice import EnvironmentChoice
from regatta_shared.events import AgentSpec, ModelSpec
from regatta_shared.messaging.jobs import AttemptJob

from tests.integration.container_support import BASE_IMAGE, LOCAL_IMAGES, containers_of, write_task

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("built_images_removed")]

EVIDENCE = """
[[artifacts]]
source = "/srv/state.txt"
service = "db"

[[artifacts]]
source = "/srv/hook.txt"
service = "db"

[[verifier.collect]]
command = "cat /srv/state.txt > /srv/hook.txt && echo collected-by-hook >> /srv/hook.txt"
service = "db"
"""


async def test_a_sidecars_artifacts_and_collect_hook_come_back(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    state = f"sidecar-{secrets.token_hex(8)}"
    task = write_task(tmp_path / "tasks", "sidecar-evidence", test="echo 1 > /logs/verifier/reward.txt")
    (task / "task.toml").write_text((task / "task.toml").read_text() + EVIDENCE)
    db = {
        "image": BASE_IMAGE,
        "command": ["sh", "-c", f"echo {state} > /srv/state.txt; exec sleep infinity"],
        "user": "0",
    }
    compose = {"services": {"main": {"depends_on": ["db"]}, "db": db}}
    (task / "environment" / "docker-compose.yaml").write_text(yaml.safe_dump(compose))
    job = AttemptJob(
        run_id="run-sidecar-evidence",
        attempt_id=f"att-sidecar-{secrets.token_hex(4)}",
        agent=AgentSpec(index=0, harness="oracle", model=ModelSpec(type="hosted", base_model="none")),
        task=task.name,
        task_digest="sha256:test",
        attempt_index=0,
    )
    environment = EnvironmentChoice(
        "container", {"state_dir": str(tmp_path / "state"), "local_images": LOCAL_IMAGES}
    )
    result = await run_trial(trial_config(job, task, tmp_path / "trials", environment, {}))
    assert result.get("exception_info") is None, result["exception_info"]
    assert result["verifier_result"]["rewards"] == {"reward": 1}

    kept = dict(artifacts.collect(tmp_path / "trials" / job.attempt_id))
    assert kept.get("artifacts/srv/state.txt") == f"{state}\n".encode(), sorted(kept)
    assert kept.get("artifacts/srv/hook.txt") == f"{state}\ncollected-by-hook\n".encode(), sorted(kept)
    assert containers_of(engine, job.attempt_id) == []
