"""What the tests of the `container` environment share: an engine check, ad-hoc tasks whose Dockerfile
must really be built, trials run in containers, and the engine-side traces a clean-up must leave none of."""

from __future__ import annotations

import contextlib
import secrets
import textwrap
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import docker
import pytest
from harbor.models.task.task import Task
from harbor.models.trial.config import TrialConfig
from harbor.models.trial.paths import TrialPaths
from harbor.models.trial.result import TrialResult
from harbor.trial.trial import Trial
from regatta_executor.attempt.outcome import classify
from regatta_executor.container.engine import (
    CONTAINER_ENVIRONMENT,
    LABEL_DIGEST,
    LABEL_SESSION,
    engine_answers,
)
from regatta_executor.container.environment import ContainerEnvironment
from regatta_executor.container.image.task_images import IMAGE_REPOSITORY

from tests.conftest import unavailable

BASE_IMAGE = "debian:bookworm-slim"
# The local images the tests' executors may use without a pull (the `local_images` option).
LOCAL_IMAGES = ["debian:bookworm-slim", "debian:bookworm", "debian:12-slim", "debian:12"]


def require_engine(monkeypatch: pytest.MonkeyPatch) -> docker.DockerClient:
    if not engine_answers():
        unavailable("no Docker engine answers (scripts/services.sh starts one)")
    engine = docker.from_env()
    try:
        engine.images.get(BASE_IMAGE)
    except docker.errors.ImageNotFound:
        unavailable(f"{BASE_IMAGE} is not on the engine (scripts/test-image.sh makes it)")
    monkeypatch.setenv("HARBOR_TELEMETRY", "0")
    return engine


@contextlib.contextmanager
def images_built_are_removed(folder: Path) -> Iterator[None]:
    """Remove, at the end, the task images that attempts with a state folder under `folder` built
    meanwhile (most tests' Dockerfiles are unique, and the engine would keep them all). Never a base
    image, never one made before, never one a container still uses."""
    started = time.time()
    try:
        yield
    finally:
        remove_images_built(folder, since=started)


def remove_images_built(folder: Path, since: float) -> list[str]:
    engine = docker.from_env()
    removed = []
    for digest in sorted({lock.stem for lock in folder.glob("**/images/*.lock")}):
        for image in engine.images.list(filters={"label": f"{LABEL_DIGEST}={digest}"}):
            created = datetime.strptime(image.attrs["Created"][:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
            if created.timestamp() < since - 1:
                continue
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):  # gone, or in use
                engine.images.remove(f"{IMAGE_REPOSITORY}:{digest}")
                removed.append(digest)
    return removed


def baked_task(parent: Path, name: str, *, network_mode: str = "no-network", extra: str = "") -> Path:
    """A task whose oracle passes only if its Dockerfile was really built: a RUN that writes a file, a
    COPY, an ENV and a WORKDIR, none of which the solution or the tests make themselves. A unique
    line keeps its image digest apart from other runs'."""
    task = write_task(
        parent,
        name,
        solve="""
            cat /opt/marker.txt > answer.txt
            printf '%s\\n' "$GREETING" >> answer.txt
            pwd >> answer.txt
            cat /opt/copied.txt >> answer.txt
        """,
        test="""
            expected=$(printf 'baked\\nhello from ENV\\n/srv/work\\ncopied\\n')
            if [ "$(cat /srv/work/answer.txt 2>/dev/null)" = "$expected" ]; then echo 1; else echo 0; fi \\
              > /logs/verifier/reward.txt
        """,
        network_mode=network_mode,
        dockerfile=f"""
            FROM {BASE_IMAGE}
            RUN echo baked > /opt/marker.txt && echo {secrets.token_hex(8)} > /opt/unique
            COPY copied.txt /opt/copied.txt
            ENV GREETING="hello from ENV"
            WORKDIR /srv/work
            {extra}
        """,
    )
    (task / "environment" / "copied.txt").write_text("copied\n")
    return task


def write_task(
    parent: Path,
    name: str,
    *,
    solve: str = "true",
    test: str = "echo 0 > /logs/verifier/reward.txt",
    network_mode: str = "no-network",
    agent_timeout_sec: int = 60,
    verifier_timeout_sec: int = 60,
    dockerfile: str | None = None,
    environment: str = "",
    verifier: str = "",
) -> Path:
    task = parent / name
    for sub in ("environment", "tests", "solution"):
        (task / sub).mkdir(parents=True)
    (task / "task.toml").write_text(
        f'schema_version = "1.4"\n\n[agent]\ntimeout_sec = {agent_timeout_sec}\n\n'
        f"[verifier]\ntimeout_sec = {verifier_timeout_sec}\n{verifier}\n"
        f'[environment]\nnetwork_mode = "{network_mode}"\n{environment}'
    )
    (task / "instruction.md").write_text(f"Ad-hoc task {name}.\n")
    (task / "environment" / "Dockerfile").write_text(
        textwrap.dedent(dockerfile or f"FROM {BASE_IMAGE}\nWORKDIR /app\n").strip() + "\n"
    )
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\n" + textwrap.dedent(solve))
    (task / "tests" / "test.sh").write_text("#!/bin/bash\n" + textwrap.dedent(test))
    return task


def trial_config(task: Path, agent: str, work: Path, **kwargs: Any) -> TrialConfig:
    verifier_env = kwargs.pop("verifier_env", None)
    return TrialConfig(
        task={"path": str(task)},
        trials_dir=work / "trials",
        agent={"name": agent},
        environment={
            "import_path": CONTAINER_ENVIRONMENT,
            "delete": True,
            "kwargs": {"state_dir": str(work / "state"), "local_images": LOCAL_IMAGES, **kwargs},
        },
        verifier={"env": verifier_env or {}},
    )


async def run_trial(task: Path, agent: str, work: Path, **kwargs: Any) -> TrialResult:
    trial = await Trial.create(trial_config(task, agent, work, **kwargs))
    return await trial.run()


def trial_dir(work: Path, result: TrialResult) -> Path:
    return work / "trials" / result.trial_name


def build_log(work: Path, result: TrialResult) -> str:
    path = trial_dir(work, result) / "environment-build.log"
    return path.read_text() if path.exists() else ""


def rewards(result: TrialResult) -> dict[str, float | int] | None:
    return result.verifier_result.rewards if result.verifier_result else None


def exception_type(result: TrialResult) -> str | None:
    return result.exception_info.exception_type if result.exception_info else None


def outcome(result: TrialResult) -> str:
    return classify(result.model_dump(mode="json"), pass_threshold=1.0).outcome


def containers_of(engine: docker.DockerClient, trial_name: str) -> list[str]:
    """Containers (running or not) of a trial, found by the session label Regatta puts on them."""
    found = engine.api.containers(all=True, filters={"label": LABEL_SESSION})
    return [c["Names"][0] for c in found if c["Labels"].get(LABEL_SESSION, "").startswith(trial_name)]


@contextlib.asynccontextmanager
async def started_environment(
    tmp_path: Path, task: Path | None = None, **kwargs: object
) -> AsyncIterator[ContainerEnvironment]:
    """A started environment outside any trial, for the exec, copy and limit contracts."""
    loaded = Task(task or write_task(tmp_path / "tasks", "direct"))
    paths = TrialPaths(tmp_path / "trial")
    paths.mkdir()
    env = ContainerEnvironment(
        environment_dir=loaded.paths.environment_dir,
        environment_name=loaded.name,
        session_id=f"direct-{secrets.token_hex(4)}__env",
        trial_paths=paths,
        task_env_config=loaded.config.environment,
        **{"state_dir": str(tmp_path / "state"), "local_images": LOCAL_IMAGES, **kwargs},
    )
    await env.start(force_build=False)
    try:
        yield env
    finally:
        await env.stop(delete=True)


def host_addresses() -> list[str]:
    """This machine's own IPv4 addresses other than loopback (every interface, docker bridges too)."""
    import fcntl
    import socket
    import struct

    found = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            if name == "lo":
                continue
            try:
                packed = fcntl.ioctl(probe.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue  # no IPv4 address
            found.append(socket.inet_ntoa(packed[20:24]))
    return found
