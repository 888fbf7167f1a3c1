"""The example benchmark and terminus-2 in the `container` environment: every example task gives the same
outcomes as under `local`, and terminus-2 (with the scripted OpenAI-compatible server) solves a task whose
tmux session lives inside the container."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import docker
import pytest
from regatta_executor.attempt.trials import EnvironmentChoice, run_trial, trial_config
from regatta_executor.container.engine import CONTAINER_ENVIRONMENT
from regatta_shared.events import AgentSpec, ModelSpec
from regatta_shared.messaging.jobs import AttemptJob

from tests.conftest import EXAMPLES
from tests.integration.container_support import LOCAL_IMAGES, containers_of
from tests.integration.local_environment_support import example_tasks, require_sandbox_host, sandboxes_dir
from tests.support.scripted_llm import ScriptedLLM, terminus_reply

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
pytestmark = [pytest.mark.timeout(600), pytest.mark.usefixtures("built_images_removed")]


def attempt(harness: str, task: str, index: int, model: ModelSpec | None = None) -> AttemptJob:
    return AttemptJob(
        run_id="run-containers",
        attempt_id=f"att-{harness}-{task}-{index}",
        agent=AgentSpec(index=0, harness=harness, model=model or ModelSpec(type="hosted", base_model="none")),
        task=task,
        task_digest="sha256:test",
        attempt_index=index,
    )


async def outcomes(environment: EnvironmentChoice, work: Path) -> dict[tuple[str, str], object]:
    gate = asyncio.Semaphore(4)

    async def one(harness: str, task: Path) -> tuple[tuple[str, str], object]:
        job = attempt(harness, task.name, 0)
        async with gate:
            result = await run_trial(trial_config(job, task, work / "trials", environment, {}))
        exception = result.get("exception_info") or {}
        if exception:
            return (harness, task.name), f"{exception['exception_type']}: {exception['exception_message']}"
        return (harness, task.name), (result.get("verifier_result") or {}).get("rewards")

    pairs = [(harness, task) for harness in ("oracle", "nop") for task in example_tasks()]
    return dict(await asyncio.gather(*(one(h, t) for h, t in pairs)))


async def test_example_benchmark_gives_the_same_outcomes_in_local_and_in_containers(
    engine: docker.DockerClient, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    require_sandbox_host(monkeypatch)
    local = await outcomes(
        EnvironmentChoice("local", {"sandbox_dir": str(sandboxes_dir(tmp_path))}), tmp_path
    )
    contained = await outcomes(
        EnvironmentChoice(
            CONTAINER_ENVIRONMENT, {"state_dir": str(tmp_path / "state"), "local_images": LOCAL_IMAGES}
        ),
        tmp_path / "c",
    )
    assert contained == local
    assert all(
        isinstance(v, dict) and max(v.values()) > 0 for (h, _), v in contained.items() if h == "oracle"
    ), contained
    assert all(
        isinstance(v, dict) and max(v.values()) == 0 for (h, _), v in contained.items() if h == "nop"
    ), contained


async def test_terminus2_solves_a_task_inside_a_container(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    task = tmp_path / "tasks" / "hello-file"
    shutil.copytree(EXAMPLES / "tasks" / "hello-file", task)
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace("timeout_sec = 60", "timeout_sec = 300"))
    script = [
        # `hostname` proves where the keystrokes ran: the container's host name is "sandbox".
        terminus_reply(
            ["printf 'Hello, Regatta!\\n' > /app/hello.txt\n", "hostname > /logs/agent/where.txt\n"]
        ),
        terminus_reply(task_complete=True, analysis="The file is written."),
        terminus_reply(task_complete=True, analysis="Confirmed."),
    ]
    with ScriptedLLM(script, prompt_tokens=1000, completion_tokens=50) as llm:
        model = ModelSpec(type="endpoint", model="gpt-4o-mini", api_key_secret="KEY", base_url=llm.base_url)
        job = attempt("terminus-2", "hello-file", 0, model)
        environment = EnvironmentChoice(
            CONTAINER_ENVIRONMENT, {"state_dir": str(tmp_path / "state"), "local_images": LOCAL_IMAGES}
        )
        result = await run_trial(
            trial_config(job, task, tmp_path / "trials", environment, {"KEY": "sk-test"})
        )
    exception = result.get("exception_info") or {}
    assert exception.get("exception_type") is None, exception.get("exception_message")
    assert result["verifier_result"]["rewards"] == {"reward": 1.0}
    assert llm.calls == 3
    trial = tmp_path / "trials" / job.attempt_id
    assert (trial / "agent" / "where.txt").read_text().strip() == "sandbox"
    assert containers_of(engine, job.attempt_id) == []
