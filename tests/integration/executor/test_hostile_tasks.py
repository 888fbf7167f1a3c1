"""Hostile tasks, each run as a real Harbor trial with the `oracle` harness in a real sandbox, each
asserting that its attack failed and that the host is intact afterwards (issue 18's threat model,
docs/reliability.md): kernel tunables, the host's network services, a process the agent leaves behind
for the verifier phase, host secrets, the log folders' size, and the uid the sandbox runs as.

Every test runs against every environment in `ENVIRONMENTS`: the same guarantees hold in each.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import secrets
import shutil
import signal
import subprocess
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from harbor.models.trial.config import TrialConfig
from harbor.models.trial.result import TrialResult
from harbor.trial.trial import Trial
from regatta_executor.container.engine import CONTAINER_ENVIRONMENT

from tests.integration.container_support import LOCAL_IMAGES, require_engine
from tests.integration.local_environment_support import (
    LOCAL_ENVIRONMENT,
    exception_type,
    marker,
    outcome,
    processes_mentioning,
    require_sandbox_host,
    rewards,
    sandboxes_dir,
    write_task,
)
from tests.support.attacks import RIGGER
from tests.support.host_secrets import planted_host_secret

pytestmark = pytest.mark.timeout(90)


@dataclass(frozen=True)
class Environment:
    import_path: str
    kwargs: Callable[[Path], dict[str, Any]]
    require: Callable[[pytest.MonkeyPatch], None]


# One entry per sandbox implementation.
ENVIRONMENTS = {
    "local": Environment(
        LOCAL_ENVIRONMENT, lambda work: {"sandbox_dir": str(sandboxes_dir(work))}, require_sandbox_host
    ),
    "container": Environment(
        CONTAINER_ENVIRONMENT,
        lambda work: {"state_dir": str(work / "state"), "local_images": LOCAL_IMAGES},
        require_engine,
    ),
}


@pytest.fixture(params=sorted(ENVIRONMENTS))
def environment(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Environment:
    chosen = ENVIRONMENTS[request.param]
    chosen.require(monkeypatch)
    return chosen


async def run_oracle(environment: Environment, task: Path, work: Path, **kwargs: Any) -> TrialResult:
    config = TrialConfig(
        task={"path": str(task)},
        trials_dir=work / "trials",
        agent={"name": "oracle"},
        environment={
            "import_path": environment.import_path,
            "delete": True,
            "kwargs": {**environment.kwargs(work), **kwargs},
        },
    )
    trial = await Trial.create(config)
    return await trial.run()


def trial_dir(work: Path, result: TrialResult) -> Path:
    return work / "trials" / result.trial_name


_TUNABLES = (
    "kernel/core_pattern",
    "vm/overcommit_memory",
    "kernel/panic",
    "fs/suid_dumpable",
    "kernel/randomize_va_space",
)


async def test_kernel_tunables_cannot_be_written(environment: Environment, tmp_path: Path) -> None:
    """The core_pattern escape: a pipe handler in core_pattern would run as host root on the next
    crash. Every write must be refused and the host's values must stay as they were."""
    pwned = tmp_path / f"{marker('core')}-pwned"
    before = {name: Path("/proc/sys", name).read_text() for name in _TUNABLES}
    writes = "\n".join(
        f"echo {value} > /proc/sys/{name} 2>/dev/null && echo 'wrote {name}' || echo 'refused {name}'"
        for name, value in (
            ("kernel/core_pattern", "'|/logs/agent/h.sh'"),
            ("vm/overcommit_memory", "1"),
            ("kernel/panic", "1"),
            ("fs/suid_dumpable", "2"),
            ("kernel/randomize_va_space", "0"),
        )
    )
    solve = f"""
        printf '#!/bin/sh\\ntouch {pwned}\\n' > /logs/agent/h.sh && chmod +x /logs/agent/h.sh
        {{
        {writes}
        echo c > /proc/sysrq-trigger 2>/dev/null && echo 'wrote sysrq-trigger' || echo 'refused sysrq-trigger'
        echo 1 > /sys/kernel/mm/ksm/run 2>/dev/null && echo 'wrote sys' || echo 'refused sys'
        mount -o remount,rw /proc/sys 2>/dev/null && echo 'remounted /proc/sys' || echo 'refused remount'
        }} > /logs/agent/writes.txt
        ulimit -c unlimited; sh -c 'kill -SEGV $$'
        exit 0
    """
    task = write_task(tmp_path / "tasks", "tunables", solve=textwrap.dedent(solve))
    result = await run_oracle(environment, task, tmp_path)

    assert exception_type(result) is None
    lines = (trial_dir(tmp_path, result) / "agent" / "writes.txt").read_text().splitlines()
    assert len(lines) == len(_TUNABLES) + 3 and all(line.startswith("refused") for line in lines), lines
    assert {name: Path("/proc/sys", name).read_text() for name in _TUNABLES} == before
    assert not pwned.exists()


def _host_addresses() -> list[str]:
    ip = shutil.which("ip")
    assert ip, "the test needs iproute2 to find the host's addresses"
    listed = json.loads(subprocess.run([ip, "-j", "-4", "addr"], capture_output=True, check=True).stdout)
    found = [info["local"] for iface in listed for info in iface.get("addr_info", [])]
    return [a for a in found if not ipaddress.IPv4Address(a).is_loopback]


@pytest.mark.parametrize("network_mode", ["public", "no-network"])
async def test_the_hosts_services_are_unreachable(
    environment: Environment, tmp_path: Path, network_mode: str
) -> None:
    """Listeners stand for the stack's NATS, gateway and database: one on the host's loopback and
    one on every address of the host. A public task has an outbound route and still reaches none."""
    accepted: list[str] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(str(writer.get_extra_info("peername")))
        writer.write(b"hello from the host\n")
        await writer.drain()
        writer.close()

    loopback = await asyncio.start_server(answer, "127.0.0.1", 0)
    everywhere = await asyncio.start_server(answer, "0.0.0.0", 0)
    host_addresses = _host_addresses()
    assert host_addresses, "the host has no address besides loopback"
    local_port = loopback.sockets[0].getsockname()[1]
    any_port = everywhere.sockets[0].getsockname()[1]
    targets = [("127.0.0.1", local_port), ("127.0.0.1", any_port), ("10.0.2.2", local_port)]
    targets += [(address, port) for address in host_addresses for port in (local_port, any_port)]
    probe = f"""
        python3 - <<'PY' > /logs/agent/probe.txt
        import socket
        for host, port in {targets!r}:
            try:
                with socket.create_connection((host, port), timeout=2) as s:
                    print("connected", host, port, s.recv(100))
            except OSError as exc:
                print("refused", host, port, exc)
        routes = open("/proc/net/route").read().splitlines()[1:]
        print("default-route", any(line.split()[1] == "00000000" for line in routes))
        PY
    """
    task = write_task(tmp_path / "tasks", f"reach-{network_mode}", solve=probe, network_mode=network_mode)
    async with loopback, everywhere:
        result = await run_oracle(environment, task, tmp_path)

    assert exception_type(result) is None
    lines = (trial_dir(tmp_path, result) / "agent" / "probe.txt").read_text().splitlines()
    assert [line for line in lines if line.startswith("connected")] == []
    assert len([line for line in lines if line.startswith("refused")]) == len(targets)
    assert lines[-1] == f"default-route {network_mode == 'public'}"
    assert accepted == []


async def test_under_enforce_a_process_left_by_the_agent_cannot_rig_the_verifier(
    environment: Environment, tmp_path: Path
) -> None:
    """A background loop started by the agent keeps writing reward 1 and scans every process's
    environment for the verifier's secret. The tests always fail; the verifier sees its secret."""
    secret = f"verifier-only-{secrets.token_hex(8)}"
    test = """
        echo 0 > /logs/verifier/reward.txt
        [ -n "$VERIFIER_SECRET" ] && echo "the verifier has its secret" > /logs/verifier/seen.txt
        for i in $(seq 40); do
            [ "$(cat /logs/verifier/reward.txt)" = 0 ] || echo "rigged" >> /logs/verifier/rigged.txt
            sleep 0.05
        done
    """
    task = write_task(tmp_path / "tasks", "rigger", solve=RIGGER, test=test)
    with (task / "task.toml").open("a") as toml:
        toml.write(f'\n[verifier.env]\nVERIFIER_SECRET = "{secret}"\n')
    result = await run_oracle(environment, task, tmp_path, verifier_integrity="enforce")

    assert exception_type(result) is None
    assert rewards(result) == {"reward": 0} and outcome(result) == "failed"
    trial = trial_dir(tmp_path, result)
    assert (trial / "verifier" / "seen.txt").exists(), "the verifier never had the secret to steal"
    assert not (trial / "verifier" / "rigged.txt").exists()
    # The loop ran, and scanned (stolen.txt exists), during the agent's phase.
    assert [p.read_text() for p in (trial / "artifacts").rglob("alive.txt")] == ["alive\n"]
    assert [p.name for p in (trial / "artifacts").rglob("stolen.txt")] == ["stolen.txt"]
    left = [trial / folder for folder in ("agent", "artifacts", "verifier")]
    files = [p for folder in left for p in folder.rglob("*") if p.is_file() and not p.is_symlink()]
    assert [p.name for p in files if secret.encode() in p.read_bytes()] == []


async def test_under_enforce_the_agent_cannot_disarm_the_kill_by_replacing_the_images_programs(
    environment: Environment, tmp_path: Path
) -> None:
    """The kill before the verifier once ran the image's /bin/sh (and its tr, grep): a root agent that
    replaced them with `true` kept its rigging loop alive into the verifier."""
    disarm = """
        for program in /bin/sh /usr/bin/sh /usr/bin/tr /usr/bin/grep /usr/bin/kill /bin/kill; do
            [ -e "$program" ] && ln -sf /bin/true "$program" 2>/dev/null
        done
        exit 0
    """
    test = """
        echo 0 > /logs/verifier/reward.txt
        for i in $(seq 40); do
            [ "$(cat /logs/verifier/reward.txt)" = 0 ] || echo "rigged" >> /logs/verifier/rigged.txt
            sleep 0.05
        done
    """
    task = write_task(tmp_path / "tasks", "disarm", solve=RIGGER + textwrap.dedent(disarm), test=test)
    result = await run_oracle(environment, task, tmp_path, verifier_integrity="enforce")

    trial = trial_dir(tmp_path, result)
    assert [p.read_text() for p in (trial / "artifacts").rglob("alive.txt")] == ["alive\n"]
    assert not (trial / "verifier" / "rigged.txt").exists()
    if environment.import_path == CONTAINER_ENVIRONMENT:
        # Under `enforce`, the image's programs the agent replaced, with nothing to explain them, are
        # named, and the attempt is `failed` before the verifier runs.
        assert exception_type(result) == "SandboxTamperedError"
        assert "/usr/bin/sh (changed)" in result.exception_info.exception_message
        assert rewards(result) is None and outcome(result) == "failed"
    else:
        assert exception_type(result) is None
        assert rewards(result) == {"reward": 0} and outcome(result) == "failed"


async def test_the_processes_that_outlive_the_agent_are_closed_to_it(
    environment: Environment, tmp_path: Path
) -> None:
    """What the environment keeps running across the kill before the verifier (pid 1, and whatever
    else is not in the agent's own session) must be closed to ptrace and to /proc/<pid>/mem: code
    injected there would outlive the kill and could rewrite the reward."""
    # As the agent's uid, then (a root agent can setuid) as each process's own uid.
    solve = """
        python3 - <<'PY' > /logs/agent/survivors.txt
        import os
        def peek(pid):
            try:
                with open(f"/proc/{pid}/maps") as maps:
                    maps.read()
                return True
            except OSError:
                return False
        def peek_as(uid, pid):
            child = os.fork()
            if child == 0:
                try:
                    os.setgroups([]); os.setgid(uid); os.setuid(uid)
                except OSError:
                    os._exit(2)
                os._exit(0 if peek(pid) else 1)
            return os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]) == 0
        me = os.getsid(0)
        for pid in sorted(int(p) for p in os.listdir("/proc") if p.isdigit()):
            try:
                if os.getsid(pid) == me:
                    continue
                status = open(f"/proc/{pid}/status").read()
                comm = open(f"/proc/{pid}/comm").read().strip()
            except OSError:
                continue
            uid = int(next(l for l in status.splitlines() if l.startswith("Uid:")).split()[1])
            state = "open" if peek(pid) or peek_as(uid, pid) else "closed"
            print(state, pid, comm, uid)
        PY
    """
    task = write_task(tmp_path / "tasks", "survivors", solve=solve)
    result = await run_oracle(environment, task, tmp_path)

    assert exception_type(result) is None
    lines = (trial_dir(tmp_path, result) / "agent" / "survivors.txt").read_text().splitlines()
    assert any(line.startswith("closed 1 ") for line in lines), lines
    assert [line for line in lines if line.startswith("open")] == []


@pytest.fixture
def planted_secrets() -> Iterator[tuple[str, list[Path]]]:
    with planted_host_secret() as planted:
        yield planted.value, planted.paths


async def test_host_secrets_are_not_visible(
    environment: Environment, tmp_path: Path, planted_secrets: tuple[str, list[Path]]
) -> None:
    secret, paths = planted_secrets
    listener = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    solve = f"""
        cat /etc/shadow > /logs/agent/shadow.txt 2>/dev/null
        cat /etc/gshadow >> /logs/agent/shadow.txt 2>/dev/null
        cat /etc/ssh/ssh_host_*_key >> /logs/agent/shadow.txt 2>/dev/null
        cat {" ".join(map(str, paths))} > /logs/agent/planted.txt 2>/dev/null
        grep -rs {secret} /etc /var/lib /root >> /logs/agent/planted.txt 2>/dev/null
        ls -A /var/lib > /logs/agent/var-lib.txt 2>/dev/null
        ls -A /root /home > /logs/agent/homes.txt 2>/dev/null
        cat /proc/net/tcp /proc/net/tcp6 > /logs/agent/tcp.txt 2>/dev/null
        exit 0
    """
    task = write_task(tmp_path / "tasks", "secrets", solve=solve)
    async with listener:
        result = await run_oracle(environment, task, tmp_path)

    assert exception_type(result) is None
    agent = trial_dir(tmp_path, result) / "agent"
    # The host's shadow file: masked (local), or the image's own file, which lacks the host's
    # accounts (container). Either way no line of it is the host's.
    host_shadow = Path("/etc/shadow").read_text()
    assert host_shadow, "the host has a shadow file to protect"
    read = (agent / "shadow.txt").read_text()
    assert host_shadow not in read
    assert secret not in (agent / "planted.txt").read_text()
    assert paths[1].parent.name not in (agent / "var-lib.txt").read_text().split()
    assert paths[2].name not in (agent / "homes.txt").read_text().split()
    assert "regatta" not in (agent / "var-lib.txt").read_text()  # e.g. a stack's data directory
    files = [p for p in trial_dir(tmp_path, result).rglob("*") if p.is_file()]
    assert [p.name for p in files if secret.encode() in p.read_bytes()] == []
    listening = f":{port:04X} "
    assert listening not in (agent / "tcp.txt").read_text()


async def test_log_folders_have_a_total_cap(environment: Environment, tmp_path: Path) -> None:
    """200 MiB in 2 MiB files (under any per-file cap) across the agent's log folders, cap 16 MiB."""
    fill = """
        for i in $(seq 50); do
            head -c 2M /dev/zero > /logs/agent/fill-$i 2>/dev/null || break
        done
        for i in $(seq 50); do
            head -c 2M /dev/zero > /logs/artifacts/fill-$i 2>/dev/null || break
        done
        exit 0
    """
    task = write_task(tmp_path / "tasks", "fill-logs", solve=fill, storage_mb=16)
    result = await run_oracle(environment, task, tmp_path)

    assert exception_type(result) is None
    trial = trial_dir(tmp_path, result)
    written = sum(p.stat().st_size for p in (trial / "agent").rglob("fill-*"))
    written += sum(p.stat().st_size for p in (trial / "artifacts").rglob("fill-*"))
    assert 8 * 1024 * 1024 <= written <= 16 * 1024 * 1024


async def test_the_sandbox_is_not_host_root(environment: Environment, tmp_path: Path) -> None:
    """Seen from the host, the sandbox's processes run as an unprivileged uid in a user namespace
    of their own, in which they cannot make further user namespaces."""
    sleeper = marker("sandbox-uid")
    solve = f"""
        unshare --user --map-root-user true 2>/dev/null && echo nested > /logs/agent/userns.txt \\
            || echo refused > /logs/agent/userns.txt
        (exec -a {sleeper} sleep 1000) &
        wait $!  # until the test, having looked at it from the host, kills it
    """
    task = write_task(tmp_path / "tasks", "uid", solve=solve)
    trial = asyncio.create_task(run_oracle(environment, task, tmp_path))
    try:
        deadline = asyncio.get_running_loop().time() + 30
        while not processes_mentioning(sleeper) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        (found,) = processes_mentioning(sleeper)
        pid = found.split(":")[0]
        status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
        user_ns = os.readlink(f"/proc/{pid}/ns/user")
    finally:
        for line in processes_mentioning(sleeper):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(line.split(":")[0]), signal.SIGKILL)
        result = await trial

    assert exception_type(result) is None
    uids = {int(v) for v in status["Uid"].split()} | {int(v) for v in status["Gid"].split()}
    assert 0 not in uids and min(uids) >= 1000, status["Uid"]
    assert user_ns != os.readlink("/proc/self/ns/user")
    # Nor can it make user namespaces of its own (each a full capability set over new namespaces).
    assert (tmp_path / "trials" / result.trial_name / "agent" / "userns.txt").read_text() == "refused\n"
