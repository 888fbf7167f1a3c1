"""The janitor on a real engine while other executors work: executors sharing a state folder never
remove each other's live containers, and a sweep is never broken by a container that vanishes (or is
being removed) between the listing and its removal; it used to inspect each listed container and
raised "No such container" into another attempt."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import threading
from pathlib import Path

import docker
import pytest
from regatta_executor.container import janitor
from regatta_executor.container.engine import LABEL_MANAGED, LABEL_OWNER

from tests.integration.container_support import BASE_IMAGE

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("built_images_removed")]

SWEEPING_EXECUTOR = """
import asyncio, json, sys
sys.path.insert(0, sys.argv[3])
from pathlib import Path
from regatta_executor.container import janitor
from regatta_executor.container.engine import client
from tests.integration.container_support import started_environment

async def main():
    state = Path(sys.argv[2])
    async with started_environment(Path(sys.argv[1]), state_dir=str(state)) as env:
        print(env.container_name, flush=True)
        loop = asyncio.get_running_loop()
        while await loop.run_in_executor(None, sys.stdin.readline):
            print(json.dumps(janitor.sweep(client(), state / "owners")), flush=True)

asyncio.run(main())
"""


def test_executors_sharing_a_state_folder_never_remove_each_others_live_containers(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    root, state = str(Path(__file__).resolve().parents[4]), tmp_path / "shared-state"
    executors = [
        subprocess.Popen(
            [sys.executable, "-c", SWEEPING_EXECUTOR, str(tmp_path / name), str(state), root],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "HARBOR_TELEMETRY": "0"},
        )
        for name in ("first", "second")
    ]
    try:
        names = []
        for executor in executors:
            assert executor.stdout and executor.stdin
            names.append(executor.stdout.readline().strip())
        assert all(names) and names[0] != names[1]
        for _ in range(3):
            for executor in executors:
                assert executor.stdin and executor.stdout
                executor.stdin.write("sweep\n")
                executor.stdin.flush()
                assert json.loads(executor.stdout.readline()) == []
        assert janitor.sweep(engine, state / "owners") == []  # a third executor: this test
        assert [engine.containers.get(name).status for name in names] == ["running", "running"]
    finally:
        for executor in executors:
            if executor.stdin:
                executor.stdin.close()  # the executor ends its attempt and removes its container
            executor.wait(timeout=60)
    assert [executor.returncode for executor in executors] == [0, 0]


def _dead_owners_containers(engine: docker.DockerClient, owners: Path, count: int) -> list[str]:
    """Created (never started) containers labelled as an executor's whose lock is gone: a dead one."""
    labels = {
        LABEL_MANAGED: "1",
        **janitor.ownership_labels(owners),
        LABEL_OWNER: f"dead-{secrets.token_hex(4)}",
    }
    names = []
    for _ in range(count):
        name = f"regatta-test-janitor-{secrets.token_hex(6)}"
        engine.api.create_container(BASE_IMAGE, ["true"], name=name, labels=labels, network_disabled=True)
        names.append(name)
    return names


def _remove(engine: docker.DockerClient, names: list[str]) -> None:
    for name in names:
        try:
            engine.api.remove_container(name, force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if exc.status_code != 409:
                raise


def test_a_sweep_skips_containers_removed_after_the_listing(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    owners = tmp_path / "state" / "owners"
    names = _dead_owners_containers(engine, owners, 6)
    try:
        listing = janitor.listed(engine, owners)
        assert sorted(c["Names"][0].lstrip("/") for c in listing) == sorted(names)
        _remove(engine, names[:3])  # gone between the listing and the removal
        assert sorted(janitor.remove_dead(engine, owners, listing)) == sorted(names[3:])
        assert janitor.listed(engine, owners) == []
    finally:
        _remove(engine, names)


def test_concurrent_sweeps_and_removals_never_raise(engine: docker.DockerClient, tmp_path: Path) -> None:
    owners = tmp_path / "state" / "owners"
    names = _dead_owners_containers(engine, owners, 16)
    errors: list[BaseException] = []
    removed: list[list[str]] = []

    def sweeping() -> None:
        try:
            for _ in range(6):
                removed.append(janitor.sweep(engine, owners))
        except BaseException as exc:
            errors.append(exc)

    def removing() -> None:
        try:
            _remove(engine, names[::2])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=sweeping) for _ in range(3)] + [threading.Thread(target=removing)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=240)
        assert errors == []
        assert janitor.listed(engine, owners) == []
        swept = [name for batch in removed for name in batch]
        # Two sweeps may both be told a container's removal succeeded (the engine answers 204 to a
        # removal that raced another): what matters is that nothing but the dead owner's went.
        assert set(swept) <= set(names)
    finally:
        _remove(engine, names)
