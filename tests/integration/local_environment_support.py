"""What the tests of the `local` environment share: a host check, ad-hoc tasks, trials and environments
run in them, and the host-side traces (processes, cgroups, mounts) a clean-up must leave none of."""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import shutil
import tempfile
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from harbor.models.task.task import Task
from harbor.models.trial.config import TrialConfig
from harbor.models.trial.paths import TrialPaths
from harbor.models.trial.result import TrialResult
from harbor.trial.trial import Trial
from regatta_executor.attempt.outcome import classify
from regatta_executor.local.environment import LocalEnvironment
from regatta_executor.local.limits import leaf_parents

from tests.conftest import EXAMPLES, unavailable

LOCAL_ENVIRONMENT = "regatta_executor.local.environment:LocalEnvironment"


def require_sandbox_host(monkeypatch: pytest.MonkeyPatch) -> None:
    if os.geteuid() != 0 or not all(shutil.which(tool) for tool in ("bwrap", "nsenter", "setpriv")):
        unavailable("the local environment needs root, bubblewrap and util-linux")
    # Harbor otherwise imports litellm and phones home after a run.
    monkeypatch.setenv("HARBOR_TELEMETRY", "0")


def sandboxes_dir(work: Path) -> Path:
    """`work`/sandboxes, linked to a folder that unprivileged users can reach (sandboxes run as
    unprivileged uids and bubblewrap must walk to them; pytest's tmp_path is private to root)."""
    link = work / "sandboxes"
    if not link.is_symlink():
        work.mkdir(parents=True, exist_ok=True)
        real = Path(tempfile.mkdtemp(prefix="regatta-test-sandboxes-", dir="/tmp"))
        real.chmod(0o711)
        link.symlink_to(real)
        # Empty once every sandbox is gone (assert_cleaned_up checks); left if a test leaked one.
        atexit.register(_remove_if_empty, real)
    return link


def _remove_if_empty(folder: Path) -> None:
    with contextlib.suppress(OSError):
        folder.rmdir()


def marker(label: str) -> str:
    """A name unique to this run, so that checks on host processes ignore concurrent runs."""
    return f"{label}-{secrets.token_hex(4)}"


def example_tasks() -> list[Path]:
    return sorted(p for p in (EXAMPLES / "tasks").iterdir() if p.is_dir())


def write_task(
    parent: Path,
    name: str,
    *,
    solve: str = "true",
    test: str = "echo 0 > /logs/verifier/reward.txt",
    network_mode: str = "no-network",
    agent_timeout_sec: int = 30,
    verifier_timeout_sec: int = 30,
    storage_mb: int | None = None,
) -> Path:
    task = parent / name
    for sub in ("environment", "tests", "solution"):
        (task / sub).mkdir(parents=True)
    (task / "task.toml").write_text(
        f'schema_version = "1.4"\n\n[agent]\ntimeout_sec = {agent_timeout_sec}\n\n'
        f"[verifier]\ntimeout_sec = {verifier_timeout_sec}\n\n"
        f'[environment]\nnetwork_mode = "{network_mode}"\n'
        + (f"storage_mb = {storage_mb}\n" if storage_mb else "")
    )
    (task / "instruction.md").write_text(f"Ad-hoc task {name}.\n")
    (task / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\n" + textwrap.dedent(solve))
    (task / "tests" / "test.sh").write_text("#!/bin/bash\n" + textwrap.dedent(test))
    return task


async def run_trial(task: Path, agent: str, work: Path, **kwargs: object) -> TrialResult:
    config = TrialConfig(
        task={"path": str(task)},
        trials_dir=work / "trials",
        agent={"name": agent},
        environment={
            "import_path": LOCAL_ENVIRONMENT,
            "delete": True,
            "kwargs": {"sandbox_dir": str(sandboxes_dir(work)), **kwargs},
        },
    )
    trial = await Trial.create(config)
    return await trial.run()


def processes_mentioning(*needles: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(needle in cmdline for needle in needles):
            found.append(f"{entry.name}: {cmdline}")
    return found


def cgroups_named(fragment: str) -> list[Path]:
    return [leaf for parent in leaf_parents() for leaf in parent.glob(f"*{fragment}*")]


def mounts_under(folder: Path) -> list[str]:
    real = str(folder.resolve())
    return [
        line.split()[4]
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if line.split()[4].startswith(real)
    ]


def outcome(result: TrialResult) -> str:
    return classify(result.model_dump(mode="json"), pass_threshold=1.0).outcome


def assert_cleaned_up(work: Path, *names: str) -> None:
    sandboxes = work / "sandboxes"
    assert not sandboxes.exists() or not any(sandboxes.iterdir()), list(sandboxes.iterdir())
    assert mounts_under(sandboxes) == []
    assert processes_mentioning(str(sandboxes), str(sandboxes.resolve()), *names) == []
    for name in names:
        assert cgroups_named(name) == []


def rewards(result: TrialResult) -> dict[str, float | int] | None:
    return result.verifier_result.rewards if result.verifier_result else None


def exception_type(result: TrialResult) -> str | None:
    return result.exception_info.exception_type if result.exception_info else None


@contextlib.asynccontextmanager
async def started_environment(tmp_path: Path, **kwargs: object) -> AsyncIterator[LocalEnvironment]:
    """A started environment outside any trial, for the exec, copy and limit contracts."""
    task = Task(write_task(tmp_path / "tasks", "direct"))
    paths = TrialPaths(tmp_path / "trial")
    paths.mkdir()
    env = LocalEnvironment(
        environment_dir=task.paths.environment_dir,
        environment_name=task.name,
        session_id=f"{marker('direct')}__env",
        trial_paths=paths,
        task_env_config=task.config.environment,
        sandbox_dir=str(sandboxes_dir(tmp_path)),
        **kwargs,
    )
    await env.start(force_build=False)
    try:
        yield env
    finally:
        await env.stop(delete=True)
        assert_cleaned_up(tmp_path, env.session_id)
