"""What Harbor refuses while it makes a trial (`Trial.create`) is the task's, the same on every try and
every executor (trial_creation.py): the attempt's job, run as an executor runs it, ends `errored` once
with Harbor's message and is settled on its first delivery, never redelivered until the executor's bound
and reported `ExecutorFailed`. Nothing of the attempt is made."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from tests.integration.container_support import write_task
from tests.integration.executor_jobs import ENVIRONMENTS, containers_left, environment_choice, run_job

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("built_images_removed")]

# task.toml lines, and what Harbor says of them.
REFUSED = {
    "a phase network policy": (
        '[agent]\nnetwork_mode = "public"\n',
        "Static network policy inference cannot make a restricted phase public, and this environment "
        "cannot change network policy after start.",
    ),
    "windows": ('[environment]\nos = "windows"\n', "does not support Windows containers"),
    "a missing test script": ('[environment]\nos = "windows"\n', "does not contain tests/test.bat"),
}


def _task(parent: Path, lines: str, *, windows_scripts: bool) -> Path:
    task = write_task(parent, f"refused-{secrets.token_hex(4)}", solve="echo ran > /logs/agent/ran.txt")
    if windows_scripts:
        (task / "tests" / "test.bat").write_text("echo 1 > C:\\logs\\verifier\\reward.txt\n")
        (task / "solution" / "solve.bat").write_text("echo ran\n")
    toml = task / "task.toml"
    sections = toml.read_text()
    # The helper writes [agent] and [environment]; the refused key goes into the section it names.
    section, line = lines.split("\n", 1)
    toml.write_text(sections.replace(f"{section}\n", f"{section}\n{line}", 1))
    return task


@pytest.mark.parametrize("refused", list(REFUSED))
@pytest.mark.parametrize("kind", ENVIRONMENTS)
async def test_a_trial_harbor_refuses_to_make_ends_errored_once_with_its_message(
    nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, refused: str
) -> None:
    lines, said = REFUSED[refused]
    task = _task(tmp_path / "tasks", lines, windows_scripts=refused == "windows")
    done = await run_job(nats_url, tmp_path, environment_choice(kind, tmp_path, monkeypatch), task)

    assert [(r.outcome, r.delivery, r.try_number) for r in done.finished] == [("errored", 1, 1)], done.reports
    (report,) = done.finished
    assert report.exception_type == "TaskEnvironmentError", report
    assert said in (report.exception_message or ""), report.exception_message
    assert "retrying" not in [r.kind for r in done.reports], "not retried"
    assert report.artifacts == []
    assert containers_left(kind, done.job) == []
