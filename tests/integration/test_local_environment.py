"""Regatta's `local` Harbor environment against real bubblewrap: the example tasks, network isolation,
resource limits, timeouts, persistence between commands and clean-up."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import signal
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from harbor.models.task.task import Task
from harbor.models.trial.config import TrialConfig
from harbor.models.trial.paths import TrialPaths
from harbor.models.trial.result import TrialResult
from harbor.trial.trial import Trial
from regatta_executor.artifacts import collect
from regatta_executor.limits import leaf_parents
from regatta_executor.local_environment import LocalEnvironment
from regatta_executor.outcome import classify

from tests.conftest import EXAMPLES, unavailable

LOCAL_ENVIRONMENT = "regatta_executor.local_environment:LocalEnvironment"
MULTI_METRIC_TASK = "rot13"

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def _sandbox_host(monkeypatch: pytest.MonkeyPatch) -> None:
    if os.geteuid() != 0 or not all(shutil.which(tool) for tool in ("bwrap", "nsenter", "setpriv")):
        unavailable("the local environment needs root, bubblewrap and util-linux")
    # Harbor otherwise imports litellm and phones home after a run.
    monkeypatch.setenv("HARBOR_TELEMETRY", "0")


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
            "kwargs": {"sandbox_dir": str(work / "sandboxes"), **kwargs},
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
    return [
        line.split()[4]
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if line.split()[4].startswith(str(folder))
    ]


def outcome(result: TrialResult) -> str:
    return classify(result.model_dump(mode="json"), pass_threshold=1.0).outcome


def assert_cleaned_up(work: Path, *names: str) -> None:
    sandboxes = work / "sandboxes"
    assert not sandboxes.exists() or not any(sandboxes.iterdir()), list(sandboxes.iterdir())
    assert mounts_under(sandboxes) == []
    assert processes_mentioning(str(sandboxes), *names) == []
    for name in names:
        assert cgroups_named(name) == []


def rewards(result: TrialResult) -> dict[str, float | int] | None:
    return result.verifier_result.rewards if result.verifier_result else None


def exception_type(result: TrialResult) -> str | None:
    return result.exception_info.exception_type if result.exception_info else None


def test_registry_lists_every_example_task() -> None:
    (dataset,) = json.loads((EXAMPLES / "registry.json").read_text())
    assert (dataset["name"], dataset["version"]) == ("regatta-examples", "1.0")
    listed = sorted(t["path"] for t in dataset["tasks"])
    assert listed == [f"tasks/{p.name}" for p in example_tasks()]
    assert len(listed) >= 8
    reward_json = [p.name for p in example_tasks() if "reward.json" in (p / "tests" / "test.sh").read_text()]
    assert reward_json == [MULTI_METRIC_TASK]


@pytest.mark.parametrize(
    ("agent", "expected", "expected_multi"),
    [("oracle", 1, {"reward": 1, "style": 0.5}), ("nop", 0, {"reward": 0, "style": 0})],
)
async def test_example_tasks_pass_with_oracle_and_fail_with_nop(
    tmp_path: Path, agent: str, expected: int, expected_multi: dict[str, float]
) -> None:
    tasks = example_tasks()
    results = await asyncio.gather(*(run_trial(task, agent, tmp_path) for task in tasks))

    for task, result in zip(tasks, results, strict=True):
        want = expected_multi if task.name == MULTI_METRIC_TASK else {"reward": expected}
        assert (task.name, exception_type(result)) == (task.name, None)
        assert (task.name, rewards(result)) == (task.name, want)
        assert result.reward_valid
    assert_cleaned_up(tmp_path, *(r.trial_name for r in results))


@pytest.mark.parametrize(
    ("network_mode", "share_host_network", "reachable"),
    [
        ("no-network", True, False),
        ("allowlist", True, False),
        ("public", True, True),
        ("public", False, False),
    ],
)
async def test_network_mode_decides_whether_the_host_is_reachable(
    tmp_path: Path, network_mode: str, share_host_network: bool, reachable: bool
) -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"hello from the host\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    test = f"""
        python3 - <<'PY'
        import socket
        try:
            with socket.create_connection(("127.0.0.1", {port}), timeout=3) as s:
                print("connected:", s.recv(100))
            reward = 1
        except OSError as exc:
            print("failed to connect:", exc)
            reward = 0
        open("/logs/verifier/reward.txt", "w").write(str(reward))
        PY
    """
    task = write_task(tmp_path / "tasks", f"net-{network_mode}", test=test, network_mode=network_mode)
    if network_mode == "allowlist":
        with (task / "task.toml").open("a") as toml:
            toml.write('allowed_hosts = ["127.0.0.1"]\n')
    async with server:
        result = await run_trial(task, "nop", tmp_path, share_host_network=share_host_network)

    assert exception_type(result) is None
    assert rewards(result) == {"reward": 1 if reachable else 0}
    log = (tmp_path / "trials" / result.trial_name / "verifier" / "test-stdout.txt").read_text()
    assert ("connected: b'hello from the host" in log) == reachable
    assert_cleaned_up(tmp_path, result.trial_name)


async def test_fork_bomb_in_the_agent_phase_is_contained(tmp_path: Path) -> None:
    bomb = """
        :(){ :|:& };:
        exec sleep 1000
    """
    task = write_task(tmp_path / "tasks", "fork-bomb", solve=bomb, agent_timeout_sec=3)
    started = time.monotonic()
    result = await run_trial(task, "oracle", tmp_path, max_processes=64)

    assert time.monotonic() - started < 20
    assert exception_type(result) == "AgentTimeoutError"
    assert rewards(result) == {"reward": 0}
    assert result.reward_valid
    oracle_log = (tmp_path / "trials" / result.trial_name / "agent" / "oracle.txt").read_text()
    assert "Resource temporarily unavailable" in oracle_log
    assert_cleaned_up(tmp_path, result.trial_name)


@pytest.mark.parametrize("how", ["sleeps", "spins"])
async def test_never_ending_agent_ends_with_agent_timeout(tmp_path: Path, how: str) -> None:
    sleeper = marker("endless-agent")
    solve = {
        "sleeps": f"exec -a {sleeper} sleep 1000\n",
        "spins": f"(exec -a {sleeper} sleep 1000) & while :; do :; done\n",
    }[how]
    task = write_task(tmp_path / "tasks", "endless-agent", solve=solve, agent_timeout_sec=2)
    started = time.monotonic()
    result = await run_trial(task, "oracle", tmp_path)

    assert time.monotonic() - started < 10
    assert exception_type(result) == "AgentTimeoutError"
    assert rewards(result) == {"reward": 0}
    assert outcome(result) == "failed", "an agent's own timeout is scored, not retried"
    assert processes_mentioning(sleeper) == []
    assert_cleaned_up(tmp_path, result.trial_name)


async def test_never_ending_verifier_ends_with_verifier_timeout(tmp_path: Path) -> None:
    sleeper = marker("endless-verifier")
    test = f"(exec -a {sleeper} sleep 1000)\necho 1 > /logs/verifier/reward.txt\n"
    task = write_task(tmp_path / "tasks", "endless-verifier", test=test, verifier_timeout_sec=3)
    started = time.monotonic()
    result = await run_trial(task, "nop", tmp_path)

    assert time.monotonic() - started < 3 + 5
    assert exception_type(result) == "VerifierTimeoutError"
    assert processes_mentioning(sleeper) == []
    assert_cleaned_up(tmp_path, result.trial_name)


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
        sandbox_dir=str(tmp_path / "sandboxes"),
        **kwargs,
    )
    await env.start(force_build=False)
    try:
        yield env
    finally:
        await env.stop(delete=True)
        assert_cleaned_up(tmp_path, env.session_id)


@pytest.fixture
async def environment(tmp_path: Path) -> AsyncIterator[LocalEnvironment]:
    async with started_environment(tmp_path, max_processes=64, default_memory_mb=256) as env:
        yield env


async def test_processes_survive_from_one_exec_to_the_next(environment: LocalEnvironment) -> None:
    started = time.monotonic()
    first = await environment.exec("sleep 100 & tmux new-session -d -s keep 'sleep 200'; echo started")
    assert (first.return_code, first.stdout) == (0, "started\n")
    assert time.monotonic() - started < 5

    second = await environment.exec(
        "pgrep -f 'sleep 100' > /dev/null && tmux has-session -t keep && echo alive"
    )
    assert (second.return_code, second.stdout) == (0, "alive\n")


async def test_exec_contract(environment: LocalEnvironment, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REGATTA_HOST_ONLY", "leaked")
    result = await environment.exec(
        'pwd; echo "$HOME $USER $LANG $GREETING ${REGATTA_HOST_ONLY:-clean}"; echo oops >&2; exit 3',
        env={"GREETING": "hi"},
    )
    assert (result.return_code, result.stdout, result.stderr) == (
        3,
        "/app\n/root root C.UTF-8 hi clean\n",
        "oops\n",
    )
    assert (await environment.exec("pwd", cwd="/tmp")).stdout == "/tmp\n"
    capabilities = (await environment.exec("grep ^CapBnd /proc/self/status")).stdout or ""
    sys_module, sys_admin = 16, 21
    assert int(capabilities.split()[1], 16) & (1 << sys_module | 1 << sys_admin) == 0

    streamed: list[str] = []

    async def collect(text: str, stream: str) -> None:
        streamed.append(text)

    with environment.scoped_output_callback(collect):
        merged = await environment.exec("echo a; echo b >&2; printf c")
    assert (merged.stdout, merged.stderr, "".join(streamed)) == ("a\nb\nc", None, "a\nb\nc")

    started = time.monotonic()
    with pytest.raises(RuntimeError, match="timed out after 1 seconds"):
        await environment.exec("sleep 321 & sleep 322; echo never", timeout_sec=1)
    assert time.monotonic() - started < 4
    assert (await environment.exec("pgrep -f 'sleep 32[12]' || echo none")).stdout == "none\n"


async def test_each_command_starts_as_a_fresh_session(environment: LocalEnvironment) -> None:
    """Its own session, stdin from /dev/null, the signals pid 1 handles back at their defaults,
    killable by the OOM killer (pid 1 is exempt where the host allows it), in the cwd asked for; a
    missing cwd fails that command only."""
    result = await environment.exec(
        'read -r _ _ _ _ _ sid _ < /proc/$$/stat; [ "$sid" = "$$" ] && echo leader; '
        "readlink /proc/$$/fd/0; cat /proc/$$/oom_score_adj; pwd; grep ^SigIgn /proc/$$/status",
        cwd="/tmp",
    )
    *lines, ignored = (result.stdout or "").splitlines()
    assert lines == ["leader", "/dev/null", "0", "/tmp"]
    handled_by_pid_1 = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD, signal.SIGINT)
    assert int(ignored.split()[1], 16) & sum(1 << (s - 1) for s in handled_by_pid_1) == 0
    missing = await environment.exec("echo ran", cwd="/no/such/folder")
    assert missing.return_code == 125 and not missing.stdout
    assert "cannot change directory to '/no/such/folder'" in (missing.stderr or "")
    assert (await environment.exec("pwd")).stdout == "/app\n"


async def test_limits_are_enforced(environment: LocalEnvironment) -> None:
    hog = await environment.exec("python3 -c 'x = bytearray(512 * 1024 * 1024); print(len(x))'")
    assert hog.return_code != 0 and hog.stdout is None

    # A fork bomb left running exhausts the process limit; the next command must still run.
    bomb = marker("leftover-bomb")
    await environment.exec(f":(){{ :|:& }};: # {bomb}")
    deadline = time.monotonic() + 15
    while len(processes_mentioning(bomb)) < 64 - 6 and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert len(processes_mentioning(bomb)) <= 64
    after = await environment.exec("echo still-usable")
    assert (after.return_code, after.stdout) == (0, "still-usable\n")
    assert {"pids", "memory"} <= environment.enforced_limits


async def test_limits_hold_without_cgroups(tmp_path: Path) -> None:
    async with started_environment(
        tmp_path, use_cgroups=False, max_processes=64, default_memory_mb=256
    ) as env:
        hog = await env.exec("python3 -c 'x = bytearray(512 * 1024 * 1024)'")
        assert hog.return_code != 0 and "MemoryError" in (hog.stderr or "")
        if "pids" not in env.enforced_limits:
            pytest.skip("this kernel has no per-namespace pid_max (Linux < 6.14)")

        bomb = marker("bomb-without-cgroup")
        await env.exec(f":(){{ :|:& }};: # {bomb}")
        peak, deadline = 0, time.monotonic() + 10
        while time.monotonic() < deadline:
            peak = max(peak, len(processes_mentioning(bomb)))
            if peak > 64:
                deadline = min(deadline, time.monotonic() + 1)
            await asyncio.sleep(0.05)
        assert 64 < peak <= 64 + 300


async def test_copies_stay_inside_the_sandbox(environment: LocalEnvironment, tmp_path: Path) -> None:
    source = tmp_path / "upload"
    (source / "sub").mkdir(parents=True)
    (source / "sub" / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (source / "sub" / "run.sh").chmod(0o755)
    await environment.upload_dir(source, "/app/in")
    assert (await environment.exec("/app/in/sub/run.sh")).stdout == "ran\n"
    await environment.upload_file(source / "sub" / "run.sh", "/app/in/")

    await environment.exec(
        "mkdir -p out/d && echo data > out/d/f && ln -s /etc/hostname out/link && mkfifo out/fifo"
    )
    await environment.download_dir("/app/out", tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").rglob("*")) == ["d", "f"]

    await environment.exec(
        "ln -s /etc /app/etc-link; ln -s /etc/hostname /app/host-file; ln -s ../../.. /app/up"
    )
    with pytest.raises(PermissionError):
        await environment.download_file("/app/host-file", tmp_path / "hostname")
    with pytest.raises(PermissionError):
        await environment.upload_file(source / "sub" / "run.sh", "/app/etc-link/run.sh")
    with pytest.raises(PermissionError):
        await environment.upload_file(source / "sub" / "run.sh", "/tmp/../../usr/run.sh")
    with pytest.raises(OSError):
        await asyncio.wait_for(environment.download_file("/app/out/fifo", tmp_path / "fifo"), 5)
    # A relative symlink cannot climb above the sandbox root either.
    await environment.upload_file(source / "sub" / "run.sh", "/app/up/escaped.sh")
    assert (await environment.exec("cat /escaped.sh")).stdout == "#!/bin/sh\necho ran\n"
    assert environment.sandbox_root is not None
    assert (environment.sandbox_root / "escaped.sh").exists()


async def test_sandbox_of_a_killed_executor_dies_and_is_swept_later(tmp_path: Path) -> None:
    workspace = tmp_path / "sandboxes" / marker("killed-executor")
    sleeper = marker("orphan")
    executor = textwrap.dedent("""
        import asyncio, sys
        from pathlib import Path, PurePosixPath
        from regatta_executor.limits import Limits
        from regatta_executor.sandbox import Sandbox, SandboxSpec

        async def main() -> None:
            spec = SandboxSpec(Path(sys.argv[1]), PurePosixPath("/"), False, limits=Limits(max_processes=32))
            sandbox = Sandbox(spec)
            await sandbox.start()
            await sandbox.exec(f"(exec -a {sys.argv[2]} sleep 1000) &", cwd="/")
            print("running", flush=True)
            await asyncio.sleep(1000)

        asyncio.run(main())
    """)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", executor, str(workspace), sleeper, stdout=asyncio.subprocess.PIPE
    )
    assert process.stdout is not None
    assert await asyncio.wait_for(process.stdout.readline(), 20) == b"running\n"
    assert processes_mentioning(sleeper)
    process.kill()
    await process.wait()

    deadline = time.monotonic() + 5
    while processes_mentioning(str(workspace), sleeper) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert processes_mentioning(str(workspace), sleeper) == []
    assert workspace.is_dir()

    result = await run_trial(write_task(tmp_path / "tasks", "after-crash"), "nop", tmp_path)
    assert rewards(result) == {"reward": 0}
    assert not workspace.exists()
    assert_cleaned_up(tmp_path, workspace.name, result.trial_name)


async def test_a_task_that_fills_the_disk_is_capped(tmp_path: Path) -> None:
    fill = """
        dd if=/dev/zero of=/app/fill bs=1M count=200 2> /logs/agent/dd-root.txt
        dd if=/dev/zero of=/tmp/fill bs=1M count=200 2> /logs/agent/dd-tmp.txt
        dd if=/dev/zero of=/logs/agent/fill bs=1M count=200 2> /logs/agent/dd-logs.txt
        df -k / > /logs/agent/df.txt
        for i in $(seq 1000); do echo $i > /app/small-$i || break; done
        exit 0
    """
    test = "test -s /app/fill && echo 0 > /logs/verifier/reward.txt || echo 1 > /logs/verifier/reward.txt\n"
    task = write_task(tmp_path / "tasks", "fill-disk", solve=fill, test=test, storage_mb=32)
    result = await run_trial(task, "oracle", tmp_path)

    assert exception_type(result) is None, "the verifier still ran after the disk filled"
    assert rewards(result) == {"reward": 0} and outcome(result) == "failed"
    agent = tmp_path / "trials" / result.trial_name / "agent"
    assert "No space left on device" in (agent / "dd-root.txt").read_text()
    assert "No space left on device" in (agent / "dd-tmp.txt").read_text()
    # The log folders are on the host's disk, bounded per file by RLIMIT_FSIZE (the storage cap).
    assert (agent / "fill").stat().st_size <= 32 * 1024 * 1024
    assert int((agent / "df.txt").read_text().splitlines()[1].split()[1]) == 32 * 1024
    assert_cleaned_up(tmp_path, result.trial_name)


async def test_a_task_cannot_write_outside_its_sandbox(tmp_path: Path) -> None:
    tag = marker("escape")
    host_file = tmp_path / f"{tag}-host.txt"
    targets = [f"/etc/{tag}", f"/usr/local/{tag}", f"/var/tmp/{tag}", f"/opt/{tag}", str(host_file)]
    attempts = "\n".join(f"echo pwned 2>> /logs/agent/errors.txt > {t}" for t in targets)
    solve = f"""
        {attempts}
        mount -o remount,rw /usr 2>> /logs/agent/errors.txt
        mount -t tmpfs none /etc 2>> /logs/agent/errors.txt
        ln -s / /app/root-link && echo pwned 2>> /logs/agent/errors.txt > /app/root-link/etc/{tag}
        echo 4096 2>> /logs/agent/errors.txt > /proc/sys/kernel/pid_max
        ls /proc | grep -E '^[0-9]+$' | wc -l > /logs/agent/visible-pids.txt
        exit 0
    """
    task = write_task(tmp_path / "tasks", "escape", solve=solve)
    pid_max = Path("/proc/sys/kernel/pid_max").read_text()
    result = await run_trial(task, "oracle", tmp_path)

    assert exception_type(result) is None and outcome(result) == "failed"
    for target in targets:
        assert not Path(target).exists(), target
    assert Path("/proc/sys/kernel/pid_max").read_text() == pid_max
    agent = tmp_path / "trials" / result.trial_name / "agent"
    errors = (agent / "errors.txt").read_text()
    assert errors.count("Read-only file system") >= 4 and errors.count("permission denied") == 2, errors
    assert int((agent / "visible-pids.txt").read_text()) < 10, "the host's processes are not visible"
    assert_cleaned_up(tmp_path, result.trial_name)


async def test_a_reward_forged_by_the_agent_is_discarded(tmp_path: Path) -> None:
    # The second route: a file planted in /tests that the tests would pick up (think conftest.py).
    forge = """
        echo 1 > /logs/verifier/reward.txt
        echo '{"reward": 1}' > /logs/verifier/reward.json
        mkdir -p /tests/plugins && touch /tests/plugins/always-pass
    """
    test = """
        if [ -f /app/solved ] || [ -e /tests/plugins/always-pass ]; then
            echo 1 > /logs/verifier/reward.txt
        else
            echo 0 > /logs/verifier/reward.txt
        fi
    """
    task = write_task(tmp_path / "tasks", "forged-reward", solve=forge, test=test)
    result = await run_trial(task, "oracle", tmp_path)

    assert exception_type(result) is None
    assert rewards(result) == {"reward": 0}
    assert outcome(result) == "failed"
    assert_cleaned_up(tmp_path, result.trial_name)


async def test_artifacts_never_follow_links_planted_by_the_agent(tmp_path: Path) -> None:
    host_secret = tmp_path / "host-secret.txt"
    host_secret.write_text("host-only content\n")
    host_dir = tmp_path / "host-dir"
    host_dir.mkdir()
    (host_dir / "inside.txt").write_text("host-only content\n")
    plant = f"""
        echo kept > /logs/agent/kept.txt
        ln -s {host_secret} /logs/agent/host-file
        ln -s /etc/passwd /logs/verifier/passwd
        ln -s {host_dir} /logs/agent/host-dir
        mkdir -p /logs/artifacts/sub && ln -s ../../agent /logs/artifacts/sub/up
        mkfifo /logs/agent/fifo
    """
    task = write_task(tmp_path / "tasks", "plant-links", solve=plant)
    result = await run_trial(task, "oracle", tmp_path)
    trial_dir = tmp_path / "trials" / result.trial_name
    assert (trial_dir / "agent" / "host-file").is_symlink()

    files = dict(await asyncio.wait_for(asyncio.to_thread(lambda: list(collect(trial_dir))), 10))

    assert files["agent/kept.txt"] == b"kept\n"
    assert "result.json" in files
    leaked = [p for p, data in files.items() if b"host-only content" in data or b"root:x:0:0" in data]
    assert leaked == []
    assert not {"agent/host-file", "verifier/passwd", "agent/fifo"} & set(files)
    assert not [p for p in files if p.startswith(("agent/host-dir/", "artifacts/sub/up/"))]
