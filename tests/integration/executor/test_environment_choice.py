"""Issue 17 (choice and honesty): which environment runs the attempts is decided once, at start, against
the real Docker engine of this machine; a name that runs nothing stops the executor there; a task's
environment that the chosen one does not build or cannot run is said so."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from regatta_executor.container.engine import engine_answers
from regatta_executor.environments.choice import (
    EnvironmentChoice,
    EnvironmentNameError,
    container_environment_installed,
    harbor_types,
    resolve_environment,
)
from regatta_executor.tasks.environment import TaskEnvironmentError, check_task_environment
from regatta_shared.events import AttemptFinished
from regatta_shared.messaging.jobs import AttemptReport

from regatta.stack import Stack
from tests.conftest import ROOT, unavailable
from tests.support.tasks import write_task

NO_ENGINE = "unix:///nonexistent/docker.sock"
NOT_BUILT = "task Dockerfiles are not built"


@pytest.fixture
def engine() -> None:
    if not Path("/var/run/docker.sock").exists() or not engine_answers():
        unavailable("no Docker engine answers on /var/run/docker.sock")


def test_auto_picks_the_container_environment_when_the_engine_answers(engine, monkeypatch) -> None:
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    resolved = resolve_environment("auto")
    if container_environment_installed():
        assert resolved.choice.kind == "container"
        assert resolved.reason == "auto: a Docker engine answered at unix:///var/run/docker.sock"
    else:  # a build without regatta_executor.container.environment: never choose what cannot load
        assert resolved.choice.kind == "local"
        assert "container environment is not installed" in resolved.reason


def test_auto_falls_back_to_local_when_no_engine_answers(monkeypatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", NO_ENGINE)
    assert engine_answers(timeout_sec=1.0) is False
    resolved = resolve_environment("auto", '{"default_memory_mb": 512}')
    assert resolved.choice == EnvironmentChoice("local", {"default_memory_mb": 512})
    assert resolved.reason == f"auto: no Docker engine answered at {NO_ENGINE}; {NOT_BUILT}"


def test_named_environments_are_taken_as_configured(monkeypatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", NO_ENGINE)
    assert resolve_environment("local").choice.kind == "local"
    assert resolve_environment("daytona").choice.harbor_config()["type"] == "daytona"
    flaky = "tests.support.flaky_environment:FlakyLocalEnvironment"
    assert resolve_environment(flaky).choice.harbor_config()["import_path"] == flaky
    if container_environment_installed():
        assert resolve_environment("docker-sdk").choice.kind == "container"
        assert "no Docker engine answers" in resolve_environment("container").reason


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("bogus", "is not an environment"),
        ("Local ", "is not an environment"),
        ("no_such_module_xyz:Environment", "cannot load that class"),
        ("regatta_executor.environments.choice:NoSuchClass", "cannot load that class"),
        ("os:path", "is not a class"),
        ("x" * 5000, "is not an environment"),
        ("a:b; rm -rf /", "is not an environment"),
    ],
)
def test_an_unknown_name_is_refused_naming_the_valid_ones(name: str, problem: str) -> None:
    with pytest.raises(EnvironmentNameError) as raised:
        resolve_environment(name)
    message = str(raised.value)
    assert problem in message
    assert len(message) < 2000  # a long name is cut, not echoed whole
    if problem != "is not a class":
        assert "local, container (or docker-sdk), auto" in message
        assert all(kind in message for kind in harbor_types()) and "module:Class" in message


def test_bad_kwargs_are_refused_at_start() -> None:
    with pytest.raises(EnvironmentNameError, match="REGATTA_EXECUTOR_ENVIRONMENT_KWARGS is not JSON"):
        resolve_environment("local", "{nope")
    with pytest.raises(EnvironmentNameError, match="must be a JSON object"):
        resolve_environment("local", "[1]")


def test_the_executor_process_exits_at_start_on_an_unknown_environment(tmp_path) -> None:
    """Before: every attempt crash-looped on a pydantic error and the run never ended."""
    env = {
        **os.environ,
        "REGATTA_EXECUTOR_ENVIRONMENT": "dockr",
        "REGATTA_DATA_DIR": str(tmp_path),
        "NATS_URL": "nats://127.0.0.1:9",  # never reached: the process stops before connecting
    }
    result = subprocess.run(
        [sys.executable, "-m", "regatta_executor"], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2, result.stderr
    said = "REGATTA_EXECUTOR_ENVIRONMENT='dockr' is not an environment. Valid: local, container"
    assert said in result.stderr
    assert "docker, " in result.stderr and "module:Class" in result.stderr
    assert "Traceback" not in result.stderr


def test_regatta_up_refuses_an_unknown_environment_before_starting_anything(tmp_path) -> None:
    stack = Stack(data_dir=tmp_path, extra_env={"REGATTA_EXECUTOR_ENVIRONMENT": "nope"})
    with pytest.raises(SystemExit, match=r"'nope' is not an environment\. Valid: local"):
        stack.start()
    assert stack.processes == {} and stack.nats is None


def test_regatta_up_decides_auto_once_for_all_its_executors(tmp_path) -> None:
    stack = Stack(data_dir=tmp_path, extra_env={"DOCKER_HOST": NO_ENGINE})
    stack.choose_environment()
    assert (stack.environment, stack.environment_reason) == (
        "local",
        f"auto: no Docker engine answered at {NO_ENGINE}; {NOT_BUILT}",
    )
    assert stack.env()["REGATTA_EXECUTOR_ENVIRONMENT"] == "local"


def test_regatta_up_asks_the_chooser_only_for_an_environment_whose_traits_need_an_engine(tmp_path) -> None:
    """`local` (no engine needed, by its traits) is taken as named without the chooser's process; the
    `container` environment, by its alias too, is asked of the chooser, which looks for the engine."""
    stack = Stack(data_dir=tmp_path, extra_env={"REGATTA_EXECUTOR_ENVIRONMENT": " local "})
    stack.choose_environment()
    assert (stack.environment, stack.environment_reason) == ("local", "as configured")

    stack = Stack(
        data_dir=tmp_path, extra_env={"REGATTA_EXECUTOR_ENVIRONMENT": "docker-sdk", "DOCKER_HOST": NO_ENGINE}
    )
    stack.choose_environment()
    assert (stack.environment, stack.environment_reason) == (
        "container",
        f"as configured; no Docker engine answers at {NO_ENGINE} yet: attempts error until one does",
    )
    assert stack.env()["REGATTA_EXECUTOR_ENVIRONMENT"] == "container"


def test_the_up_command_says_which_environment_it_chose(tmp_path) -> None:
    """…and what it is waiting for, a Try line that works as printed on a non-default port, a CLI in
    another folder that finds this stack's token, and a sign-in page naming the real token file."""
    import httpx

    state = tmp_path / "state"
    env = {
        **os.environ,
        "DOCKER_HOST": NO_ENGINE,
        "REGATTA_DATA_DIR": str(tmp_path / "data"),
        "REGATTA_HOSTED_BENCHMARKS": "[]",
        "XDG_STATE_HOME": str(state),
    }
    for name in ("REGATTA_TOKEN", "REGATTA_URL", "REGATTA_BOOTSTRAP_TOKEN"):
        env.pop(name, None)
    from regatta import nats_server

    port = nats_server.free_port()
    process = subprocess.Popen(
        [str(ROOT / ".venv/bin/regatta"), "up", "--executors", "1", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        lines = []
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            if line.startswith("Try:"):
                break
        said = "".join(lines)
        assert "Executors run tasks in the local environment (auto: no Docker engine answered at" in said
        assert f"Waiting for the gateway to answer at http://127.0.0.1:{port}/health" in said
        try_line = lines[-1].removeprefix("Try:").split()
        assert try_line[0] == f"REGATTA_URL=http://127.0.0.1:{port}", lines[-1]

        # The printed command's environment, from another folder, with no token named anywhere.
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        cli = {k: v for k, v in env.items() if k != "REGATTA_DATA_DIR"}
        cli["REGATTA_URL"] = try_line[0].split("=", 1)[1]
        listed = subprocess.run(
            [str(ROOT / ".venv/bin/regatta"), "benchmark", "list", "--json"],
            env=cli,
            cwd=elsewhere,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert listed.returncode == 0, listed.stdout + listed.stderr
        # Without the note `regatta up` left for this user, the CLI says where it looked.
        cli["XDG_STATE_HOME"] = str(tmp_path / "other-user")
        lost = subprocess.run(
            [str(ROOT / ".venv/bin/regatta"), "benchmark", "list"],
            env=cli,
            cwd=elsewhere,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert lost.returncode == 1 and f"No API token for {cli['REGATTA_URL']}" in lost.stdout, lost.stdout
        assert "REGATTA_DATA_DIR" in lost.stdout and "Missing bearer token" not in lost.stdout

        page = httpx.get(f"http://127.0.0.1:{port}/signin", timeout=10).text
        assert str((tmp_path / "data" / "token").resolve()) in page
        assert ".regatta/token</code>" not in page
    finally:
        os.killpg(process.pid, 15)
        process.wait(timeout=60)


# --- what a task's environment asks for, against what the environment gives -------------------------


def test_local_labels_a_dockerfile_it_does_not_build(tmp_path) -> None:
    task = write_task(tmp_path, "baked")
    local = EnvironmentChoice("local")
    assert check_task_environment(local, task).built is True  # FROM + WORKDIR only
    (task / "environment" / "Dockerfile").write_text(
        "# escape=`\nFROM python:3.12-slim\nARG X=1\nWORKDIR /app\n"
        "RUN apt-get update && `\n  # a comment inside\n  apt-get install -y jq\n"
        "ENV A=1\nCOPY x /x\nRUN true\n"
    )
    fidelity = check_task_environment(local, task)
    assert fidelity.built is False
    assert fidelity.note is not None
    assert "ignored its Dockerfile's RUN, ENV, COPY (environment/Dockerfile)" in fidelity.note
    assert "not built" in fidelity.note
    # A class built on LocalEnvironment runs on the host as well.
    flaky = EnvironmentChoice("tests.support.flaky_environment:FlakyLocalEnvironment")
    assert check_task_environment(flaky, task).built is False
    assert check_task_environment(EnvironmentChoice("container"), task).built is True
    # A key the container environment does not run errors the attempt once (not retried), naming it.
    (task / "environment" / "docker-compose.yaml").write_text(
        "services:\n  main: {build: .}\n  db: {image: redis, privileged: true}\n"
    )
    with pytest.raises(
        TaskEnvironmentError, match=r"^environment/docker-compose\.yaml: services\.db\.privileged is"
    ):
        check_task_environment(EnvironmentChoice("container"), task)
    assert check_task_environment(EnvironmentChoice("daytona"), task).built is None


def test_local_labels_a_prebuilt_image_it_does_not_use(tmp_path) -> None:
    task = write_task(tmp_path, "imaged")
    toml = task / "task.toml"
    toml.write_text(toml.read_text() + 'docker_image = "ghcr.io/example/tools:1"\n')
    fidelity = check_task_environment(EnvironmentChoice("local"), task)
    assert fidelity.built is False
    assert "its image 'ghcr.io/example/tools:1' (task.toml)" in (fidelity.note or "")


def test_local_labels_a_task_user_it_does_not_honour(tmp_path) -> None:
    """`local` runs every command as its sandbox's root: a task asking for another user is told so."""
    task = write_task(tmp_path, "users")
    toml = task / "task.toml"
    text = toml.read_text()
    assert "[agent]" in text and "[verifier]" in text
    toml.write_text(text.replace("[agent]\n", '[agent]\nuser = "root"\n', 1))
    assert check_task_environment(EnvironmentChoice("local"), task).built is True
    toml.write_text(text.replace("[agent]\n", '[agent]\nuser = "agent"\n', 1).replace(
        "[verifier]\n", "[verifier]\nuser = 1000\n", 1
    ))  # fmt: skip
    fidelity = check_task_environment(EnvironmentChoice("local"), task)
    assert fidelity.built is False
    said = "its [agent].user 'agent', [verifier].user '1000' (task.toml; every command ran as the sandbox's"
    assert said in (fidelity.note or "")
    assert check_task_environment(EnvironmentChoice("container"), task).built is True
    # A key the container environment does not run errors the attempt once (not retried), naming it.
    (task / "environment" / "docker-compose.yaml").write_text(
        "services:\n  main: {build: .}\n  db: {image: redis, privileged: true}\n"
    )
    with pytest.raises(
        TaskEnvironmentError, match=r"^environment/docker-compose\.yaml: services\.db\.privileged is"
    ):
        check_task_environment(EnvironmentChoice("container"), task)


def test_a_compose_task_is_refused_naming_the_file_unless_docker_or_container_runs_it(tmp_path) -> None:
    task = write_task(tmp_path, "sidecars")
    (task / "environment" / "docker-compose.yaml").write_text("services: {main: {build: .}}\n")
    for kind in ("local", "tests.support.flaky_environment:FlakyLocalEnvironment"):
        with pytest.raises(TaskEnvironmentError, match=r"environment/docker-compose\.yaml") as raised:
            check_task_environment(EnvironmentChoice(kind), task)
        assert "REGATTA_EXECUTOR_ENVIRONMENT=docker" in str(raised.value)
    assert check_task_environment(EnvironmentChoice("docker"), task).built is None
    assert check_task_environment(EnvironmentChoice("container"), task).built is True
    # A key the container environment does not run errors the attempt once (not retried), naming it.
    (task / "environment" / "docker-compose.yaml").write_text(
        "services:\n  main: {build: .}\n  db: {image: redis, privileged: true}\n"
    )
    with pytest.raises(
        TaskEnvironmentError, match=r"^environment/docker-compose\.yaml: services\.db\.privileged is"
    ):
        check_task_environment(EnvironmentChoice("container"), task)


def test_a_hostile_dockerfile_cannot_flood_the_note_or_the_report(tmp_path) -> None:
    task = write_task(tmp_path, "hostile")
    junk = "".join(f"X{i}\u202e<script>{'A' * 500}\nZZ{chr(65 + i % 26) * 10} x\n" for i in range(1000))
    (task / "environment" / "Dockerfile").write_text("FROM debian\n" + junk)
    fidelity = check_task_environment(EnvironmentChoice("local"), task)
    assert fidelity.built is False and fidelity.note is not None
    assert "<script>" not in fidelity.note and "\u202e" not in fidelity.note
    assert "(an unknown line), ZZAAAAAAAAAA," in fidelity.note and "…" in fidelity.note
    # What the executor reports of it fits the report (a report that fails validation is redelivered).
    report = AttemptReport(
        kind="finished", run_id="r", attempt_id="a", try_number=1, executor_id="e", outcome="failed",
        environment="local", environment_built=False, environment_note=fidelity.note,
    )  # fmt: skip
    assert report.environment_note == fidelity.note
    (task / "environment" / "Dockerfile").write_bytes(b"FROM x\n" + b"RUN y\n" * 300_000)  # > 1 MiB
    assert "(a Dockerfile too large to read)" in (
        check_task_environment(EnvironmentChoice("local"), task).note or ""
    )


def test_attempt_events_recorded_before_environments_were_recorded_still_read() -> None:
    old = {
        "run_id": "r", "attempt_id": "a", "agent_index": 0, "task": "t", "attempt_index": 0,
        "try_number": 1, "outcome": "passed", "executor_id": "e",
    }  # fmt: skip
    finished = AttemptFinished.model_validate(old)
    assert (finished.environment, finished.environment_built, finished.environment_note) == (None, None, None)


def test_the_executor_logs_the_environment_it_chose_at_start(tmp_path) -> None:
    env = {
        **os.environ,
        "REGATTA_EXECUTOR_ENVIRONMENT": "auto",
        "DOCKER_HOST": NO_ENGINE,
        "REGATTA_DATA_DIR": str(tmp_path),
        "NATS_URL": "nats://127.0.0.1:9",  # nothing listens: the choice is logged before connecting
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "regatta_executor"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert process.stderr is not None
        said = ""
        for line in process.stderr:
            said += line
            if "environment:" in line:
                break
        assert f"environment: local (auto: no Docker engine answered at {NO_ENGINE}; {NOT_BUILT})" in said
    finally:
        os.killpg(process.pid, 9)
        process.wait(timeout=60)
