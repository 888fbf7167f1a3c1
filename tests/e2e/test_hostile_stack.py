"""Hostile tasks through the whole stack (issue 18): one benchmark of attacks, submitted as one run with
the `oracle` harness on a running stack (real nats-server, Postgres, every service its own process),
in each sandbox environment.

Each task attacks and, where it can tell, has its verifier report whether the attack got through
(reward 1: refused). The test then checks from the host side that every attack failed (kernel
tunables unchanged, no connection to the stack's ports nor to a listener it watches, the rigged task
still failed, no host secret nor verifier-only secret in any stored artifact or download) and that
the platform is intact (the run finished with the expected numbers, the leaderboard shows them,
every service is alive and healthy).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import socket
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import nats
import pytest
from regatta_executor.container.engine import CONTAINER_ENVIRONMENT, engine_answers
from regatta_shared.messaging.bus import ARTIFACTS_BUCKET

from regatta.stack import Stack
from tests.conftest import unavailable
from tests.e2e.test_executor import add_folder, run_events
from tests.integration.container_support import BASE_IMAGE, host_addresses
from tests.support.attacks import RIGGER
from tests.support.host_secrets import PlantedSecret, planted_host_secret
from tests.support.tasks import run_toml

pytestmark = pytest.mark.timeout(600)

TUNABLES = ("kernel/core_pattern", "vm/overcommit_memory", "kernel/panic", "fs/suid_dumpable")
# Each attack's verifier passes when the attack was refused; the rigger's tests always fail.
EXPECTED = {
    "tunables": "passed",
    "reach-public": "passed",
    "reach-none": "passed",
    "rigger": "failed",
    "secrets": "passed",
    "fill": "passed",
}


def _environment_env(name: str, tmp_path: Path) -> dict[str, str]:
    if name == "local":
        return {"REGATTA_EXECUTOR_ENVIRONMENT": "local"}
    if not engine_answers():
        unavailable("no Docker engine answers (scripts/services.sh starts one)")
    return {
        "REGATTA_EXECUTOR_ENVIRONMENT": CONTAINER_ENVIRONMENT,
        "REGATTA_EXECUTOR_ENVIRONMENT_KWARGS": json.dumps({"state_dir": str(tmp_path / "container-state")}),
    }


def _write(
    root: Path, name: str, solve: str, test: str, network: str = "no-network", extra: str = ""
) -> None:
    task = root / name
    for folder in ("tests", "solution", "environment"):
        (task / folder).mkdir(parents=True)
    (task / "task.toml").write_text(
        "[agent]\ntimeout_sec = 90\n[verifier]\ntimeout_sec = 60\n"
        f'[environment]\nnetwork_mode = "{network}"\n{extra}'
    )
    (task / "instruction.md").write_text(f"Hostile task {name}.\n")
    (task / "environment" / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nWORKDIR /app\n")
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\n" + textwrap.dedent(solve))
    (task / "tests" / "test.sh").write_text("#!/bin/bash\n" + textwrap.dedent(test))


_PASS_UNLESS = "if {} ; then echo 0; else echo 1; fi > /logs/verifier/reward.txt\n"


def write_attacks(
    root: Path, targets: list[tuple[str, int]], planted: PlantedSecret, pwned: Path, verifier_secret: str
) -> Path:
    writes = "\n".join(
        f"echo {value} > /proc/sys/{name} 2>/dev/null && echo 'wrote {name}' || echo 'refused {name}'"
        for name, value in zip(TUNABLES, ("'|/logs/agent/h.sh'", "1", "1", "2"), strict=True)
    )
    _write(
        root,
        "tunables",
        solve=f"""
            printf '#!/bin/sh\\ntouch {pwned}\\n' > /logs/agent/h.sh && chmod +x /logs/agent/h.sh
            {{
            {writes}
            mount -o remount,rw /proc/sys 2>/dev/null && echo 'remounted /proc/sys' || echo 'refused remount'
            }} > /logs/artifacts/writes.txt
            ulimit -c unlimited; sh -c 'kill -SEGV $$'
            exit 0
        """,
        test=_PASS_UNLESS.format("grep -qv '^refused' /logs/artifacts/writes.txt"),
    )
    probe = f"""
        python3 - <<'PY' > /logs/artifacts/probe.txt
        import socket
        from concurrent.futures import ThreadPoolExecutor
        def attempt(target):
            try:
                with socket.create_connection(target, timeout=2) as s:
                    s.settimeout(1)
                    try:
                        return f"connected {{target}} {{s.recv(64)!r}}"
                    except OSError:
                        return f"connected {{target}}"
            except OSError as exc:
                return f"refused {{target}} {{exc}}"
        with ThreadPoolExecutor(16) as pool:
            print("\\n".join(pool.map(attempt, {targets!r})))
        PY
    """
    for name, mode in (("reach-public", "public"), ("reach-none", "no-network")):
        _write(
            root,
            name,
            solve=probe,
            test=_PASS_UNLESS.format(
                f"grep -q '^connected' /logs/artifacts/probe.txt"
                f" || [ $(grep -c '^refused' /logs/artifacts/probe.txt) != {len(targets)} ]"
            ),
            network=mode,
        )
    _write(
        root,
        "rigger",
        solve=RIGGER,
        test="""
            echo 0 > /logs/verifier/reward.txt
            [ -n "$VERIFIER_SECRET" ] && echo "the verifier has its secret" > /logs/verifier/seen.txt
            sleep 2
        """,
    )
    with (root / "rigger" / "task.toml").open("a") as toml:
        toml.write(f'[verifier.env]\nVERIFIER_SECRET = "{verifier_secret}"\n')
    paths = " ".join(map(str, planted.paths))
    _write(
        root,
        "secrets",
        solve=f"""
            cat /etc/shadow /etc/gshadow /etc/ssh/ssh_host_*_key {paths} > /logs/artifacts/read.txt \\
                2>/dev/null
            grep -rs {planted.value} /etc /var/lib /root >> /logs/artifacts/read.txt 2>/dev/null
            exit 0
        """,
        test=_PASS_UNLESS.format(f"grep -q {planted.value} /logs/artifacts/read.txt"),
    )
    _write(
        root,
        "fill",
        solve="""
            for i in $(seq 50); do head -c 2M /dev/zero > /logs/agent/fill-$i 2>/dev/null || break; done
            for i in $(seq 50); do head -c 2M /dev/zero > /logs/artifacts/fill-$i 2>/dev/null || break; done
            exit 0
        """,
        test="echo 1 > /logs/verifier/reward.txt\n",
        extra="storage_mb = 16\n",
    )
    return root


class WatchedListener:
    """A listener on every host address standing for any host service; records every connection."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("0.0.0.0", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted: list[str] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, peer = self.sock.accept()
            except OSError:
                return
            self.accepted.append(str(peer))
            conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def listener() -> Iterator[WatchedListener]:
    watched = WatchedListener()
    yield watched
    watched.close()


def _stack_targets(stack: Stack, listener: WatchedListener) -> list[tuple[str, int]]:
    assert stack.nats is not None
    postgres_port = urlsplit(stack.database_url or "").port or 5432
    ports = [stack.nats.port, stack.port, postgres_port, listener.port]
    addresses = ["127.0.0.1", "10.0.2.2", *host_addresses()]
    return [(address, port) for address in addresses for port in ports]


async def _stored(stack: Stack) -> dict[str, bytes]:
    nc = await nats.connect(stack.nats_url or "")
    try:
        store = await nc.jetstream().object_store(ARTIFACTS_BUCKET)
        return {info.name: (await store.get(info.name)).data or b"" for info in await store.list()}
    finally:
        await nc.close()


def _downloads(stack: Stack, run_id: str) -> dict[str, bytes]:
    auth = {"Authorization": f"Bearer {stack.token}"}
    with httpx.Client(base_url=stack.url, timeout=60.0) as http:
        manifest = http.get(f"/api/v1/runs/{run_id}/downloads?types=all", headers=auth).json()
        got = {}
        for item in manifest["files"]:
            response = http.get(item["url"])
            assert response.status_code == 200, item["path"]
            got[item["path"]] = response.content
    return got


@pytest.mark.parametrize("environment", ["local", "container"])
def test_hostile_tasks_fail_and_leave_the_platform_intact(
    environment: str, make_stack, api_for, tmp_path: Path, listener: WatchedListener
) -> None:
    stack = make_stack(executors=1, **_environment_env(environment, tmp_path))
    api = api_for(stack)
    verifier_secret = f"verifier-only-{secrets.token_hex(8)}"
    pwned = tmp_path / "pwned"
    before = {name: Path("/proc/sys", name).read_text() for name in TUNABLES}
    host_shadow = Path("/etc/shadow").read_text()
    targets = _stack_targets(stack, listener)
    with planted_host_secret() as planted:
        tasks = write_attacks(tmp_path / "tasks", targets, planted, pwned, verifier_secret)
        # The rigger's guarantee is the `enforce` policy's (under Harbor's `record` semantics its process
        # runs into the verifier): the benchmark names it as its standard, so the run gets it and ranks.
        (tasks / "regatta.toml").write_text('[benchmark]\nverifier_integrity = "enforce"\n')
        benchmark = add_folder(api, tasks, "hostile")
        run_id = api.submit_toml(run_toml("hostile", concurrency=3))["id"]
        detail = api.wait_run(run_id, timeout=480)

        # The attacks failed, seen from the host.
        assert {name: Path("/proc/sys", name).read_text() for name in TUNABLES} == before
        assert not pwned.exists()
        assert listener.accepted == []
        stored = asyncio.run(_stored(stack))
        downloads = _downloads(stack, run_id)
        everything = {**{f"object {k}": v for k, v in stored.items()}, **downloads}
        for needle in (planted.value, verifier_secret, host_shadow):
            leaked = [name for name, data in everything.items() if needle.encode() in data]
            assert leaked == [], (needle[:20], leaked)

    # ... and as the platform recorded them.
    assert detail["benchmark_run"]["status"] == "finished", detail["benchmark_run"]
    finished = {
        data["attempt_id"]: data for kind, data in run_events(stack, run_id) if kind == "AttemptFinished"
    }
    attempts = api.get(f"/runs/{run_id}/attempts")["attempts"]
    outcomes = {a["task"]: a["outcome"] for a in attempts}
    assert outcomes == EXPECTED, outcomes
    rigged = next(finished[a["attempt_id"]] for a in attempts if a["task"] == "rigger")
    assert rigged["primary_reward"] == 0.0
    # The rigger's loop ran during the agent's phase (it left its mark), so the rewrite was tried.
    artifact_paths = {ref["path"] for ref in rigged["artifacts"]}
    assert any(path.endswith("/alive.txt") for path in artifact_paths), sorted(artifact_paths)
    filled = next(finished[a["attempt_id"]] for a in attempts if a["task"] == "fill")
    fill_bytes = sum(ref.get("size", 0) for ref in filled["artifacts"] if "fill-" in ref["path"])
    assert fill_bytes <= 16 * 1024 * 1024, fill_bytes
    assert detail["totals"]["passed"] == 5 and detail["totals"]["failed"] == 1, detail["totals"]

    # The platform is intact: the leaderboard counts the run, every service is up and healthy.
    board: list[dict[str, Any]] = api.wait_for(
        lambda: api.get(f"/benchmarks/{benchmark['id']}/leaderboard")["leaderboard"], timeout=60
    )
    assert len(board) == 1 and abs(board[0]["pass_at_1"]["value"] - 5 / 6) < 1e-9, board
    assert all(process.poll() is None for process in stack.processes.values())
    assert stack.nats is not None and stack.nats.poll() is None
    for key, port in stack.health_ports.items():
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code in (200, 204), key
    assert httpx.get(f"{stack.url}/health", timeout=5).json() == {"status": "ok", "relay_set_aside": 0}
