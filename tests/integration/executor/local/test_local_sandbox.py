"""Regatta's `local` environment driven directly, outside any trial, against real bubblewrap: the exec
contract, processes that persist between commands, resource limits, copies in and out, and the clean-up
after a killed executor."""

from __future__ import annotations

import asyncio
import signal
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from regatta_executor.local.environment import LocalEnvironment

from tests.integration.local_environment_support import (
    assert_cleaned_up,
    marker,
    mounts_under,
    processes_mentioning,
    require_sandbox_host,
    rewards,
    run_trial,
    sandboxes_dir,
    started_environment,
    write_task,
)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def _sandbox_host(monkeypatch: pytest.MonkeyPatch) -> None:
    require_sandbox_host(monkeypatch)


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
    # SIGKILL is delivered to the whole group at once, but a loaded host may take a moment to let each
    # process die; what the contract promises is that none survives.
    left = ""
    for _ in range(50):
        left = (await environment.exec("pgrep -f 'sleep 32[12]' || echo none")).stdout or ""
        if left == "none\n":
            break
        await asyncio.sleep(0.1)
    assert left == "none\n"


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
    """Without cgroups, memory falls back to RLIMIT_AS and processes to RLIMIT_NPROC, which the kernel
    counts per user namespace and enforces on the sandbox's root (root in its namespace only)."""
    async with started_environment(
        tmp_path, use_cgroups=False, max_processes=64, default_memory_mb=256
    ) as env:
        hog = await env.exec("python3 -c 'x = bytearray(512 * 1024 * 1024)'")
        assert hog.return_code != 0 and "MemoryError" in (hog.stderr or "")
        assert "pids" in env.enforced_limits

        bomb = marker("bomb-without-cgroup")
        await env.exec(f":(){{ :|:& }};: # {bomb}")
        samples: list[int] = []
        deadline = time.monotonic() + 20
        while (not samples or max(samples) < 64 - 8) and time.monotonic() < deadline:
            samples.append(len(processes_mentioning(bomb)))
            await asyncio.sleep(0.05)
        for _ in range(20):
            samples.append(len(processes_mentioning(bomb)))
            await asyncio.sleep(0.05)
        assert 64 - 8 <= max(samples) <= 64, samples
        after = await env.exec("echo still-usable")
        assert (after.return_code, after.stdout) == (0, "still-usable\n")


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
    workspace = sandboxes_dir(tmp_path) / marker("killed-executor")
    sleeper = marker("orphan")
    executor = textwrap.dedent("""
        import asyncio, sys
        from pathlib import Path, PurePosixPath
        from regatta_executor.local.limits import Limits
        from regatta_executor.local.sandbox import Sandbox
        from regatta_executor.local.spec import Bind, SandboxSpec

        async def main() -> None:
            logs = Bind(Path(sys.argv[3]), PurePosixPath("/logs/agent"), log_folder=True)
            spec = SandboxSpec(
                Path(sys.argv[1]), PurePosixPath("/"), False, binds=(logs,), limits=Limits(max_processes=32)
            )
            sandbox = Sandbox(spec)
            await sandbox.start()
            await sandbox.exec(f"(exec -a {sys.argv[2]} sleep 1000) &", cwd="/")
            print("running", flush=True)
            await asyncio.sleep(1000)

        asyncio.run(main())
    """)
    trial_logs = tmp_path / "trial" / "agent"
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        executor,
        str(workspace),
        sleeper,
        str(trial_logs),
        stdout=asyncio.subprocess.PIPE,
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
    # The dead executor left its staged log folder bound over the trial's.
    assert mounts_under(trial_logs) == [str(trial_logs.resolve())]

    result = await run_trial(write_task(tmp_path / "tasks", "after-crash"), "nop", tmp_path)
    assert rewards(result) == {"reward": 0}
    assert not workspace.exists()
    assert mounts_under(trial_logs) == []
    assert_cleaned_up(tmp_path, workspace.name, result.trial_name)
