"""Trials of one content-addressed task folder share one loaded Task (task_loading.py) and still
produce what Harbor's own loading does."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import harbor.agents.oracle as harbor_oracle
import harbor.models.job.lock as harbor_lock
import pytest
from harbor.models.task.file_filter import TaskFileFilter
from harbor.models.task.task import Task
from harbor.models.trial.config import TrialConfig
from harbor.publisher.packager import Packager
from regatta_executor.attempt.trials import LOCAL_ENVIRONMENT, run_trial
from regatta_executor.tasks import loading as task_loading
from regatta_executor.tasks.loading import ContentAddressedTask, ContentAddressedTrial, SettledFileFilter

from tests.conftest import unavailable

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def _sandbox_host(monkeypatch: pytest.MonkeyPatch) -> None:
    if os.geteuid() != 0 or not shutil.which("bwrap"):
        unavailable("the local environment needs root and bubblewrap")
    monkeypatch.setenv("HARBOR_TELEMETRY", "0")


def _task(parent: Path, name: str, reward: int) -> Path:
    task = parent / name
    for sub in ("environment", "tests", "solution"):
        (task / sub).mkdir(parents=True)
    (task / "task.toml").write_text('[environment]\nnetwork_mode = "no-network"\n')
    (task / "instruction.md").write_text(f"Task {name}.\n")
    (task / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    (task / "solution" / "solve.sh").write_text(f"#!/bin/bash\necho {reward} > /app/answer\n")
    (task / "tests" / "test.sh").write_text("#!/bin/bash\ncp /app/answer /logs/verifier/reward.txt\n")
    return task


def _config(task: Path, work: Path, name: str) -> dict[str, object]:
    return {
        "task": {"path": str(task)},
        "trial_name": name,
        "trials_dir": str(work / "trials"),
        "agent": {"name": "oracle"},
        "environment": {"import_path": LOCAL_ENVIRONMENT, "delete": True},
    }


async def test_trials_of_a_task_folder_share_its_loading(tmp_path: Path) -> None:
    ContentAddressedTrial._loaded.clear()
    one, zero = _task(tmp_path, "one", 1), _task(tmp_path, "zero", 0)
    results = [await run_trial(_config(task, tmp_path, f"t{i}")) for i, task in enumerate([one, one, zero])]

    assert [r["verifier_result"]["rewards"]["reward"] for r in results] == [1.0, 1.0, 0.0]
    assert [r["task_name"] for r in results] == ["one", "one", "zero"]
    # One load per folder, and the checksum a trial records is Harbor's hash of that folder.
    assert sorted(key[0] for key in ContentAddressedTrial._loaded) == sorted([str(one), str(zero)])
    assert results[0]["task_checksum"] == results[1]["task_checksum"] != results[2]["task_checksum"]
    loaded, _ = ContentAddressedTrial._loaded[
        next(k for k in ContentAddressedTrial._loaded if k[0] == str(one))
    ]
    assert isinstance(loaded, ContentAddressedTask)

    assert results[0]["task_checksum"] == Task(one).checksum


async def test_the_oracle_the_lock_and_the_filters_reuse_the_folder_s_first_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The oracle's own Task, the lock's content hash and the filters' answers are computed on the
    first trial of a folder only, and are what Harbor computes."""
    ContentAddressedTrial._loaded.clear()
    hashed: list[Path] = []
    harbor_hash = task_loading._harbor_content_hash

    def counting_hash(task_dir: Path) -> tuple[str, list[Path]]:
        hashed.append(task_dir)
        return harbor_hash(task_dir)

    monkeypatch.setattr(task_loading, "_harbor_content_hash", counting_hash)
    one = _task(tmp_path, "one", 1)
    trials = []
    for index in range(3):
        trial = await ContentAddressedTrial.create(
            TrialConfig.model_validate(_config(one, tmp_path, f"t{index}"))
        )
        result = await trial.run()
        assert result.verifier_result is not None and result.verifier_result.rewards == {"reward": 1.0}
        trials.append(trial)

    assert hashed == [one.resolve()], "one content hash per folder"
    oracle_tasks = {id(trial.agent._task) for trial in trials}  # type: ignore[attr-defined]
    assert len(oracle_tasks) == 1, "the oracle loads the folder once"
    locks = [json.loads(trial.paths.lock_path.read_text()) for trial in trials]
    assert {lock["task"]["digest"] for lock in locks} == {"sha256:" + Packager.compute_content_hash(one)[0]}
    filters = {id(trial.task.file_filter) for trial in trials}
    assert len(filters) == 1 and isinstance(trials[0].task.file_filter, SettledFileFilter)
    fresh = TaskFileFilter(one)
    settled = trials[0].task.file_filter
    for folder in (one / "tests", one / "solution"):
        assert settled.select(folder) == fresh.select(folder)
    # A folder no ContentAddressedTrial loaded gets Harbor's own answers, computed afresh.
    other = _task(tmp_path, "other", 0)
    assert harbor_lock.Packager.compute_content_hash(other) == Packager.compute_content_hash(other)
    assert harbor_oracle.Task(other) is not harbor_oracle.Task(other)
    assert hashed[1:] == [other]
