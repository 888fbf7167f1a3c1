"""A multi-step task's per-step outputs come back with its attempt (artifacts.py): Harbor moves each
step's agent logs, verifier output and artifacts to steps/<name>/ in the trial folder, and the attempt's
job, run as an executor runs it under `local` and `container`, lists them among its artifacts, stored in
the artifact store with the content the steps wrote."""

from __future__ import annotations

from pathlib import Path

import nats
import pytest
from regatta_shared.messaging.bus import ARTIFACTS_BUCKET

from tests.integration.executor_jobs import ENVIRONMENTS, environment_choice, run_job
from tests.support.tasks import STEPS, two_step_task

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("built_images_removed")]


@pytest.mark.parametrize("kind", ENVIRONMENTS)
async def test_each_steps_logs_verifier_output_and_artifacts_come_back(
    nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    task = two_step_task(tmp_path / "tasks")
    done = await run_job(nats_url, tmp_path, environment_choice(kind, tmp_path, monkeypatch), task)
    (report,) = done.finished
    assert report.outcome == "passed", (report.exception_type, report.exception_message)

    refs = {ref.path: ref.digest for ref in report.artifacts}
    expected = {}
    for step in STEPS:
        expected[f"steps/{step}/agent/note.txt"] = f"agent of {step}\n"
        expected[f"steps/{step}/verifier/seen.txt"] = f"verified {step}\n"
        expected[f"steps/{step}/verifier/reward.txt"] = "1\n"
        expected[f"steps/{step}/artifacts/app/{step}.txt"] = f"made by {step}\n"
    missing = sorted(set(expected) - set(refs))
    assert not missing, (missing, sorted(refs))
    assert "result.json" in refs
    nc = await nats.connect(nats_url)
    try:
        store = await nc.jetstream().object_store(ARTIFACTS_BUCKET)
        for path, content in expected.items():
            assert (await store.get(refs[path])).data == content.encode(), path
    finally:
        await nc.close()
