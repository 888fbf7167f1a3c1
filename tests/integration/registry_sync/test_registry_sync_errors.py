"""Bad input ends the sync `failed` with a reason naming the file, repository or dataset, and the problem; a
broken task is listed invalid with its reason while the others become ready; Retry sync after the fix."""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from regatta_shared.events import BenchmarkSource

from regatta import nats_server

from ..registry_sync_support import (
    SyncHarness,
    commit_all,
    copy_examples,
    folder_source,
    git,
    git_https_server,
    init_repo,
    registry_source,
    sync_harness,
    write_task,
)

GOOD_ROT13 = (Path(__file__).resolve().parents[3] / "examples/tasks/rot13").resolve()


@dataclass
class Case:
    """`build` makes the broken input under tmp and returns the source; `fix` repairs it in place."""

    build: Callable[[Path], BenchmarkSource]
    reason: Callable[[Path], str]
    fix: Callable[[Path], object]
    exact: bool = True


def _registry(tmp: Path, datasets: object) -> Path:
    if not (tmp / "tasks").exists():
        copy_examples(tmp / "tasks")
    registry = tmp / "registry.json"
    registry.write_text(datasets if isinstance(datasets, str) else json.dumps(datasets))
    return registry


def _dataset(
    name: str = "ex", version: str = "1.0", tasks: tuple[str, ...] = ("rot13", "hello-file")
) -> dict:
    return {
        "name": name,
        "version": version,
        "description": "",
        "tasks": [{"name": t, "path": f"tasks/{t}"} for t in tasks],
    }


def _git_dataset(repo: Path, path: str) -> dict:
    task = {"name": "alpha", "git_url": f"file://{repo}", "path": path}
    return {"name": "gx", "version": "1.0", "description": "", "tasks": [task]}


def _folder(tmp: Path) -> BenchmarkSource:
    return folder_source(copy_examples(tmp / "tasks"))


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _repo(tmp: Path) -> Path:
    repo = tmp / "served" / "repo"
    init_repo(repo)
    write_task(repo / "tasks" / "alpha", 1)
    commit_all(repo, "first")
    return repo


def _git_source(url: str, ref: str | None = None) -> BenchmarkSource:
    return BenchmarkSource(type="git", ref=url, git_url=url, git_ref=ref)


CASES: dict[str, Case] = {
    "malformed registry JSON": Case(
        build=lambda tmp: registry_source(_registry(tmp, '[{"name": "ex",'), "ex"),
        reason=lambda tmp: f"registry {tmp}/registry.json: malformed JSON (Expecting property name enclosed",
        fix=lambda tmp: _registry(tmp, [_dataset()]),
        exact=False,
    ),
    "registry dataset without tasks": Case(
        build=lambda tmp: registry_source(
            _registry(tmp, [{"name": "ex", "version": "1.0", "description": ""}]), "ex"
        ),
        reason=lambda tmp: (
            f"registry {tmp}/registry.json: dataset #0 (ex) is malformed at tasks: Field required"
        ),
        fix=lambda tmp: _registry(tmp, [_dataset()]),
    ),
    "dataset that does not exist": Case(
        build=lambda tmp: registry_source(_registry(tmp, [_dataset()]), "nope"),
        reason=lambda tmp: f"registry {tmp}/registry.json: dataset 'nope' does not exist (available: ex)",
        fix=lambda tmp: _registry(tmp, [_dataset(), _dataset("nope")]),
    ),
    "version that does not exist": Case(
        build=lambda tmp: registry_source(_registry(tmp, [_dataset()]), "ex@9.9"),
        reason=lambda tmp: (
            f"registry {tmp}/registry.json: dataset 'ex' has no version '9.9' (available: 1.0)"
        ),
        fix=lambda tmp: _registry(tmp, [_dataset(), _dataset(version="9.9")]),
    ),
    "git task path leaving its repository": Case(
        build=lambda tmp: registry_source(_registry(tmp, [_git_dataset(_repo(tmp), "../alpha")]), "gx"),
        reason=lambda tmp: (
            f"registry {tmp}/registry.json: dataset gx@1.0: task 'alpha'.path "
            "must be a relative path inside the repository"
        ),
        fix=lambda tmp: _registry(tmp, [_git_dataset(tmp / "served" / "repo", "tasks/alpha")]),
    ),
    "task listed twice": Case(
        build=lambda tmp: registry_source(_registry(tmp, [_dataset(tasks=("rot13", "rot13"))]), "ex"),
        reason=lambda tmp: "task 'rot13': listed twice in dataset ex",
        fix=lambda tmp: _registry(tmp, [_dataset()]),
    ),
    "empty folder": Case(
        build=lambda tmp: (folder_source(tmp / "empty"), (tmp / "empty").mkdir())[0],
        reason=lambda tmp: "dataset empty has no tasks",
        fix=lambda tmp: shutil.copytree(GOOD_ROT13, tmp / "empty" / "rot13"),
    ),
    "git repository that is not there": Case(
        build=lambda tmp: _git_source(str(tmp / "served" / "repo")),
        reason=lambda tmp: f"git repository file://{tmp}/served/repo is unreachable (fatal: cannot change to",
        fix=_repo,
        exact=False,
    ),
    "git ref that does not exist": Case(
        build=lambda tmp: _git_source(str(_repo(tmp)), "v2"),
        reason=lambda tmp: f"git repository file://{tmp}/served/repo: ref 'v2' does not exist",
        fix=lambda tmp: git(tmp / "served" / "repo", "tag", "v2"),
    ),
    "manifest field of the wrong type": Case(
        build=lambda tmp: (
            _folder(tmp),
            _write(tmp / "tasks/regatta.toml", '[benchmark]\npass_threshold = "high"\n'),
        )[0],
        reason=lambda tmp: (
            f"manifest {tmp}/tasks/regatta.toml: [benchmark].pass_threshold must be a number (got 'high')"
        ),
        fix=lambda tmp: _write(tmp / "tasks/regatta.toml", "[benchmark]\npass_threshold = 0.5\n"),
    ),
    "manifest task set naming an unknown task": Case(
        build=lambda tmp: (
            _folder(tmp),
            _write(tmp / "tasks/regatta.toml", '[task_sets]\nparity = ["rot13", "nope"]\n'),
        )[0],
        reason=lambda tmp: (
            f"manifest {tmp}/tasks/regatta.toml: [task_sets]: task set 'parity' names unknown task 'nope'"
        ),
        fix=lambda tmp: _write(tmp / "tasks/regatta.toml", '[task_sets]\nparity = ["rot13"]\n'),
    ),
    "manifest with an unknown key": Case(
        build=lambda tmp: (
            _folder(tmp),
            _write(tmp / "tasks/regatta.toml", "[judge]\nrequires_modle = true\n"),
        )[0],
        reason=lambda tmp: f"manifest {tmp}/tasks/regatta.toml: unknown key [judge].requires_modle",
        fix=lambda tmp: _write(tmp / "tasks/regatta.toml", "[judge]\nrequires_model = true\n"),
    ),
}


# A broken task is the task's problem, not the dataset's: it is listed invalid with its reason and the
# dataset's nine other example tasks become ready; after the fix a retry lists it valid.
TASK_CASES: dict[str, Case] = {
    "task without task.toml": Case(
        build=lambda tmp: (_folder(tmp), (tmp / "tasks/rot13/task.toml").unlink())[0],
        reason=lambda tmp: "task 'rot13': task.toml is missing",
        fix=lambda tmp: shutil.copy(GOOD_ROT13 / "task.toml", tmp / "tasks/rot13/task.toml"),
    ),
    "task without its test script": Case(
        build=lambda tmp: (_folder(tmp), (tmp / "tasks/rot13/tests/test.sh").unlink())[0],
        reason=lambda tmp: "task 'rot13': tests/test.sh is missing",
        fix=lambda tmp: shutil.copy(GOOD_ROT13 / "tests/test.sh", tmp / "tasks/rot13/tests/test.sh"),
    ),
    "task.toml that is not TOML": Case(
        build=lambda tmp: (_folder(tmp), _write(tmp / "tasks/rot13/task.toml", "[agent\ntimeout_sec = 1\n"))[
            0
        ],
        reason=lambda tmp: "task 'rot13': task.toml is not valid TOML (Expected ']' at the end of a table",
        fix=lambda tmp: shutil.copy(GOOD_ROT13 / "task.toml", tmp / "tasks/rot13/task.toml"),
        exact=False,
    ),
    "task.toml with a wrong field type": Case(
        build=lambda tmp: (
            _folder(tmp),
            _write(tmp / "tasks/rot13/task.toml", '[agent]\ntimeout_sec = "soon"\n'),
        )[0],
        reason=lambda tmp: (
            "task 'rot13': task.toml is invalid at agent.timeout_sec: Input should be a valid number"
        ),
        fix=lambda tmp: shutil.copy(GOOD_ROT13 / "task.toml", tmp / "tasks/rot13/task.toml"),
        exact=False,
    ),
    "task file linking outside the task": Case(
        build=lambda tmp: (_folder(tmp), (tmp / "tasks/rot13/tests/data.txt").symlink_to("/etc/hostname"))[0],
        reason=lambda tmp: "task 'rot13': tests/data.txt links outside the task folder",
        fix=lambda tmp: (tmp / "tasks/rot13/tests/data.txt").unlink(),
    ),
    "task without instruction.md": Case(
        build=lambda tmp: (_folder(tmp), (tmp / "tasks/rot13/instruction.md").unlink())[0],
        reason=lambda tmp: "task 'rot13': instruction.md is missing",
        fix=lambda tmp: shutil.copy(GOOD_ROT13 / "instruction.md", tmp / "tasks/rot13/instruction.md"),
    ),
}


@pytest.fixture
async def harness(tmp_path: Path, nats_url: str) -> AsyncIterator[SyncHarness]:
    async with sync_harness(f"sqlite:///{tmp_path / 'events.db'}", nats_url) as h:
        yield h


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
async def test_bad_input_fails_with_a_precise_reason_and_retry_after_the_fix_is_ready(
    harness: SyncHarness, tmp_path: Path, case: str
) -> None:
    spec = CASES[case]
    work = (tmp_path / "input").resolve()
    work.mkdir()
    benchmark_id = harness.add(spec.build(work))

    failed = await harness.first_sync(benchmark_id)

    assert failed["sync_status"] == "failed"
    expected = spec.reason(work)
    if spec.exact:
        assert failed["sync_error"] == expected
    else:
        assert failed["sync_error"].startswith(expected), failed["sync_error"]
    assert failed["tasks"] == [] and failed["version"] is None
    assert len(harness.events(benchmark_id, "BenchmarkSyncFailed")) == 1

    spec.fix(work)
    ready = await harness.retry(benchmark_id)

    assert ready["sync_status"] == "ready", ready.get("sync_error")
    assert ready["task_count"] == len(ready["tasks"]) > 0 and "sync_error" not in ready


@pytest.mark.parametrize("case", list(TASK_CASES), ids=list(TASK_CASES))
async def test_a_broken_task_is_listed_invalid_and_the_rest_is_ready(
    harness: SyncHarness, tmp_path: Path, case: str
) -> None:
    spec = TASK_CASES[case]
    work = (tmp_path / "input").resolve()
    work.mkdir()
    benchmark_id = harness.add(spec.build(work))

    body = await harness.first_sync(benchmark_id)

    assert body["sync_status"] == "ready", body.get("sync_error")
    invalid = {task["name"]: task["invalid_reason"] for task in body["tasks"] if task["invalid_reason"]}
    assert list(invalid) == ["rot13"]
    if spec.exact:
        assert invalid["rot13"] == spec.reason(work)
    else:
        assert invalid["rot13"].startswith(spec.reason(work)), invalid["rot13"]
    assert body["task_count"] == 9 and len(body["tasks"]) == 10
    [page] = harness.events(benchmark_id, "BenchmarkTasksSynced")
    assert "rot13" not in [task["name"] for task in page.data["tasks"]]

    spec.fix(work)
    ready = await harness.retry(benchmark_id)

    assert ready["task_count"] == 10 and not any(task["invalid_reason"] for task in ready["tasks"])


async def test_unreachable_remote_git_url_fails_and_retry_reaches_it_once_it_answers(
    harness: SyncHarness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = nats_server.free_port()
    monkeypatch.setenv("REGATTA_OUTBOUND_ALLOW", f"127.0.0.1:{port}")
    monkeypatch.setenv("GIT_SSL_CAINFO", str(tmp_path / "certs" / "cert.pem"))
    url = f"https://127.0.0.1:{port}/repo"
    benchmark_id = harness.add(_git_source(url, "main"))

    failed = await harness.first_sync(benchmark_id)

    assert failed["sync_status"] == "failed"
    # git's own words are not shown: they would tell a closed port from an open one.
    assert failed["sync_error"] == "could not fetch git_url: unreachable"
    _repo(tmp_path)
    with git_https_server(tmp_path / "served", port, tmp_path / "certs"):
        ready = await harness.retry(benchmark_id)
    assert ready["sync_status"] == "ready", ready.get("sync_error")
    assert [t["name"] for t in ready["tasks"]] == ["alpha"]
