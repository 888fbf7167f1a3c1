"""Issue 27: the image an attempt ran is recorded on the attempt: the environment leaves its reference,
the engine's content id and (pulled, or known to the engine) its registry digest in the trial folder,
and the executor reads that record back into the attempt's finished report (attempt_image.py)."""

from __future__ import annotations

import secrets
from pathlib import Path

import docker
import pytest
from regatta_executor.attempt.image_record import IMAGE_RECORD, MAX_RECORD_BYTES, read_image_record

from tests.integration.container_support import (
    BASE_IMAGE,
    images_built_are_removed,
    require_engine,
    rewards,
    run_trial,
    trial_dir,
    write_task,
)

pytestmark = pytest.mark.timeout(300)

PASS = "echo 1 > /logs/verifier/reward.txt"


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> docker.DockerClient:
    return require_engine(monkeypatch)


async def test_an_allow_listed_local_image_is_recorded_by_its_content_id(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    task = write_task(tmp_path / "tasks", "named", test=PASS, environment=f'docker_image = "{BASE_IMAGE}"\n')
    result = await run_trial(task, "oracle", tmp_path)
    assert rewards(result) == {"reward": 1.0}, result.exception_info
    record = read_image_record(trial_dir(tmp_path, result))
    assert record is not None
    image = engine.images.get(BASE_IMAGE)
    assert (record.reference, record.image_id, record.source) == (BASE_IMAGE, image.id, "local")
    repository = BASE_IMAGE.split(":", 1)[0]
    known = [d for d in image.attrs.get("RepoDigests") or [] if d.startswith(f"{repository}@")]
    assert record.registry_digest == (known[0] if known else None)


async def test_a_built_image_is_recorded_as_built(engine: docker.DockerClient, tmp_path: Path) -> None:
    dockerfile = f"FROM {BASE_IMAGE}\nRUN echo {secrets.token_hex(8)} > /opt/unique\n"
    task = write_task(tmp_path / "tasks", "built", test=PASS, dockerfile=dockerfile)
    with images_built_are_removed(tmp_path):
        result = await run_trial(task, "oracle", tmp_path)
        record = read_image_record(trial_dir(tmp_path, result))
        assert record is not None, result.exception_info
        assert record.source == "built" and record.registry_digest is None
        assert engine.images.get(record.reference).id == record.image_id


def test_a_record_that_is_not_exactly_one_is_no_record(tmp_path: Path) -> None:
    assert read_image_record(tmp_path) is None
    path = tmp_path / IMAGE_RECORD
    good = (
        '{"reference": "debian:12", "image_id": "sha256:' + "a" * 64 + '", "registry_digest": null, '
        '"source": "local"}'
    )
    path.write_text(good)
    assert read_image_record(tmp_path) is not None
    for bad in (
        good.replace('"local"', '"stolen"'),
        good.replace("sha256:", "sha256:zz"),
        good[:-1] + ', "extra": 1}',
        good + " " * MAX_RECORD_BYTES,
        "not json",
    ):
        path.write_text(bad)
        assert read_image_record(tmp_path) is None, bad
    path.unlink()
    (tmp_path / "elsewhere.json").write_text(good)
    path.symlink_to(tmp_path / "elsewhere.json")
    assert read_image_record(tmp_path) is None, "a link is not followed"
