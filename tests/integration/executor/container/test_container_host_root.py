"""The container environment refuses an engine whose containers run as the host's root (issue 18).

A second, real dockerd of the test's own, started without userns-remap (its own data root, socket and
containerd; no bridge, no iptables, so the machine's engine is untouched), stands for such an engine.
The machine's engine (scripts/services.sh) remaps, and is the counterpart.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from regatta_executor.container import engine as engine_module
from regatta_executor.container.hardening import HostRootError, engine_root, require_remapped_root

from tests.conftest import unavailable
from tests.integration.container_support import exception_type, require_engine, run_trial, write_task

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def unremapped_engine() -> Iterator[str]:
    dockerd = shutil.which("dockerd")
    if dockerd is None or os.geteuid() != 0:
        unavailable("a second Docker engine needs dockerd and root")
    # A short path: the socket's must fit in sun_path.
    folder = Path(tempfile.mkdtemp(prefix="rg-dockerd-", dir="/tmp"))
    (folder / "daemon.json").write_text("{}")  # not /etc/docker/daemon.json, which remaps
    url = f"unix://{folder}/sock"
    bridge = Path("/sys/class/net/docker0")
    had_bridge = bridge.exists()
    unshare = shutil.which("unshare")
    assert unshare, "the second engine runs in a network namespace of its own (util-linux's unshare)"
    # In a network namespace of its own: a dockerd started with --bridge=none deletes the host's
    # `docker0` as it starts, which would take the default bridge from the machine's engine.
    process = subprocess.Popen(
        [
            unshare,
            "--net",
            "--",
            dockerd,
            f"--config-file={folder}/daemon.json",
            f"--data-root={folder}/root",
            f"--exec-root={folder}/exec",
            f"--pidfile={folder}/pid",
            f"--host={url}",
            "--bridge=none",
            "--iptables=false",
            "--ip-masq=false",
            "--storage-driver=vfs",
        ],
        stdout=(folder / "log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if docker.DockerClient(base_url=url, timeout=2).ping():
                    break
            except Exception:  # not answering yet
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError((folder / "log").read_text()[-2000:]) from None
                time.sleep(0.1)
        assert bridge.exists() == had_bridge, "the second engine took docker0 from the machine's engine"
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(folder, ignore_errors=True)


def test_the_machines_engine_remaps_root(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = require_engine(monkeypatch)
    root = engine_root(engine)
    assert root.remapped and root.host_ids and root.host_ids[0] > 0
    require_remapped_root(engine)


async def test_an_engine_running_containers_as_host_root_is_refused(
    unremapped_engine: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    other = docker.DockerClient(base_url=unremapped_engine)
    assert engine_root(other).remapped is False
    with pytest.raises(HostRootError, match="userns-remap"):
        require_remapped_root(other)

    # The executor says so at start-up: `auto` stays local, `container` warns that attempts will error.
    env = {**os.environ, "DOCKER_HOST": unremapped_engine}
    for name, kind, says in (
        ("auto", "local", "runs containers as the host's root"),
        ("container", "container", "attempts error until it remaps user namespaces"),
    ):
        chosen = subprocess.run(
            [sys.executable, "-m", "regatta_executor.choose_environment"],
            env={**env, "REGATTA_EXECUTOR_ENVIRONMENT": name},
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        decided = json.loads(chosen.stdout)
        assert decided["kind"] == kind and says in decided["reason"], decided

    # And an attempt on it errors, naming the fix, before any container exists.
    monkeypatch.setenv("HARBOR_TELEMETRY", "0")
    monkeypatch.setenv("DOCKER_HOST", unremapped_engine)
    engine_module.client.cache_clear()
    try:
        task = write_task(tmp_path / "tasks", "refused")
        result = await run_trial(task, "oracle", tmp_path)
    finally:
        engine_module.client.cache_clear()
    assert exception_type(result) == "HostRootError"
    assert "userns-remap" in (result.exception_info.exception_message if result.exception_info else "")
    assert other.api.containers(all=True) == []
