"""The `container` environment's images on a real Docker engine: the task's Dockerfile is built once per
digest (also across executor processes), build failures and timeouts and missing images are reported by
name, and built images are pruned least recently used first."""

from __future__ import annotations

import asyncio
import io
import os
import secrets
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path

import docker
import pytest
from harbor.environments.base import SandboxBuildFailedError
from regatta_executor.container.engine import LABEL_DIGEST, LABEL_MANAGED
from regatta_executor.container.image.task_images import ImageCache
from regatta_shared.rules.task_defects import TASK_DEFECT

from tests.integration.container_support import (
    BASE_IMAGE,
    LOCAL_IMAGES,
    baked_task,
    build_log,
    containers_of,
    exception_type,
    outcome,
    rewards,
    run_trial,
    write_task,
)

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("built_images_removed")]


async def _eventually(check: Callable[[], bool], deadline_sec: float = 30.0) -> bool:
    for _ in range(int(deadline_sec / 0.1)):
        if check():
            return True
        await asyncio.sleep(0.1)
    return check()


async def test_dockerfile_is_built_oracle_passes_nop_fails_and_second_attempt_reuses_it(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    task = baked_task(tmp_path / "tasks", "baked")

    first = await run_trial(task, "oracle", tmp_path)
    assert exception_type(first) is None, first.exception_info
    assert rewards(first) == {"reward": 1.0}
    assert "Successfully built" in build_log(tmp_path, first)

    second = await run_trial(task, "nop", tmp_path)
    assert rewards(second) == {"reward": 0.0}
    assert outcome(second) == "failed"
    log = build_log(tmp_path, second)
    assert "not built again" in log and "Step 1/" not in log

    cached = next(line for line in log.splitlines() if line.endswith("is cached; not built again"))
    digest = engine.images.get(cached.split()[1]).labels[LABEL_DIGEST]
    assert len(engine.images.list(filters={"label": f"{LABEL_DIGEST}={digest}"})) == 1
    assert containers_of(engine, first.trial_name) == containers_of(engine, second.trial_name) == []


def test_two_executor_processes_on_one_host_build_once(engine: docker.DockerClient, tmp_path: Path) -> None:
    task = baked_task(tmp_path / "tasks", "shared", extra="RUN sleep 2")
    script = textwrap.dedent(
        f"""
        import asyncio, sys
        sys.path.insert(0, {str(Path(__file__).resolve().parents[4])!r})
        from pathlib import Path
        from tests.integration.container_support import run_trial, rewards
        result = asyncio.run(run_trial(Path(sys.argv[1]), "oracle", Path(sys.argv[2])))
        print(rewards(result))
        """
    )
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(task), str(tmp_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=240) for p in processes]
    assert [out.strip() for out, _ in outputs] == ["{'reward': 1.0}"] * 2, outputs
    logs = [p.read_text() for p in (tmp_path / "trials").glob("*/environment-build.log")]
    assert len(logs) == 2
    assert sum("Successfully built" in log for log in logs) == 1, logs
    assert sum("not built again" in log for log in logs) == 1, logs


async def test_build_failure_and_build_timeout_are_reported(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    broken = write_task(tmp_path / "tasks", "broken", dockerfile=f"FROM {BASE_IMAGE}\nRUN exit 3\n")
    result = await run_trial(broken, "oracle", tmp_path)
    # A step of the task's own that exits non-zero is the task's defect, not an infrastructure fault.
    assert exception_type(result) == TASK_DEFECT
    message = result.exception_info.exception_message or ""
    assert message.startswith("task defect: ") and "returned a non-zero code: 3" in message
    assert outcome(result) == "errored"
    # Remembered for its run: the run's next attempt gets the same verdict without building again.
    first = await run_trial(broken, "oracle", tmp_path, run_id="run-defect")
    again = await run_trial(broken, "oracle", tmp_path, run_id="run-defect")
    assert exception_type(first) == exception_type(again) == TASK_DEFECT
    assert "not built again" in build_log(tmp_path, again)

    # A step whose output shows a network fault fails the same way on the surface, but another try may
    # cure it: it stays an infrastructure fault.
    offline = write_task(
        tmp_path / "tasks",
        "offline",
        dockerfile=f"FROM {BASE_IMAGE}\nRUN echo 'curl: (6) Could not resolve host: x.org' >&2; exit 6\n",
    )
    result = await run_trial(offline, "oracle", tmp_path)
    assert exception_type(result) == SandboxBuildFailedError.__name__

    token = secrets.token_hex(4)
    slow = write_task(
        tmp_path / "tasks",
        "slow-build",
        dockerfile=f"FROM {BASE_IMAGE}\nRUN sleep 600 # {token}\n",
        environment="build_timeout_sec = 2\n",
    )
    result = await run_trial(slow, "oracle", tmp_path)
    assert exception_type(result) in (SandboxBuildFailedError.__name__, "EnvironmentStartTimeoutError")
    assert containers_of(engine, result.trial_name) == []

    # The abandoned build's step is killed (it would sleep for ten minutes), so it never becomes an
    # image that a later attempt would take as built.
    def step_running() -> bool:
        return any(token in str(c["Command"]) for c in engine.api.containers(all=True))

    assert await _eventually(lambda: not step_running())
    digest = ImageCache(engine, tmp_path / "state", None, local_images=LOCAL_IMAGES).digest(
        slow / "environment"
    )
    assert engine.images.list(filters={"label": f"{LABEL_DIGEST}={digest}"}) == []


async def test_missing_image_is_an_error_naming_it(engine: docker.DockerClient, tmp_path: Path) -> None:
    task = write_task(tmp_path / "tasks", "prebuilt", environment='docker_image = "regatta-test/absent:1"\n')
    (task / "environment" / "Dockerfile").unlink()
    # Allow-listed as local, so no registry is asked: the engine has no such image.
    result = await run_trial(task, "oracle", tmp_path, local_images=[*LOCAL_IMAGES, "regatta-test/absent:1"])
    assert exception_type(result) == "ImageUnavailableError"
    assert "regatta-test/absent:1" in (result.exception_info.exception_message or "")


def test_a_prune_survives_images_another_executor_removes_meanwhile(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    """Executors share the engine: while one prunes, another removes its own images. A listing that
    inspects image after image met one gone in between, and the attempt whose build ran the prune
    errored (ImageNotFound)."""
    unique = secrets.token_hex(6)
    theirs = []
    for index in range(40):
        dockerfile = f"FROM {BASE_IMAGE}\nLABEL {LABEL_MANAGED}=1 {LABEL_DIGEST}=theirs-{unique}-{index}\n"
        image, _ = engine.images.build(fileobj=io.BytesIO(dockerfile.encode()), rm=True)
        theirs.append(image.id)
    cache = ImageCache(engine, tmp_path / "state", max_bytes=1 << 50, local_images=LOCAL_IMAGES)
    removed = threading.Event()

    def remove_theirs() -> None:
        for image_id in theirs:
            engine.images.remove(image_id)
        removed.set()

    remover = threading.Thread(target=remove_theirs)
    remover.start()
    prunes = 0
    try:
        while not removed.is_set():
            assert cache.prune() == []  # nothing of this cache's own to remove, and no error
            prunes += 1
    finally:
        remover.join()
    assert prunes > 0


async def test_built_images_are_pruned_least_recently_used_first(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    cache = ImageCache(engine, tmp_path / "state", max_bytes=None, local_images=LOCAL_IMAGES)
    folders = []
    for name in ("old", "new"):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nRUN echo {secrets.token_hex(8)} > /x\n")
        folders.append(folder)
    log = io.StringIO()
    built = [cache.built(folder, timeout_sec=120, network_mode="none", log=log) for folder in folders]
    assert all(image.built for image in built)
    os.utime(cache.locks / f"{cache.digest(folders[0])}.lock", (1, 1))  # used long ago
    size = engine.images.get(built[1].reference).attrs["Size"]
    cache.max_bytes = size + size // 2  # room for one of the two

    assert cache.prune() == [cache.digest(folders[0])]
    with pytest.raises(docker.errors.ImageNotFound):
        engine.images.get(built[0].reference)
    engine.images.get(built[1].reference)
    engine.images.remove(built[1].reference)
