"""Attempts per second of the `container` environment next to a plain docker-SDK script doing the same
steps (create, start, exec the solution, exec the tests, read the reward, remove) on the same prebuilt
image at the same concurrency, side by side in one run. Rounds alternate the two, and each figure is
the median over rounds, so load drifting on a shared machine hits both alike. Goal: >= 0.9x.

    .venv/bin/python bench/containers.py [--attempts 16] [--concurrency 4] [--rounds 3] [--compose]

With --compose the task is a two-service docker-compose.yaml (main, built from the task's Dockerfile, and
a sidecar of the base image), and the script does the same with the SDK: an internal network, the
sidecar created and started on it under its service name, then main on it, the same execs, and all of it
removed.

Needs a Docker engine and the test base image (scripts/services.sh, scripts/test-image.sh).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import statistics
import tarfile
import tempfile
import time
from pathlib import Path

import docker

ROOT = Path(__file__).resolve().parents[1]
SOLVE = "#!/bin/bash\necho done > /app/out.txt\n"
TEST = "#!/bin/bash\nif grep -q done /app/out.txt; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"
# The base image the machine makes locally (scripts/test-image.sh), used without a pull.
LOCAL_IMAGES = ["debian:bookworm-slim"]


COMPOSE = """services:
  main:
    depends_on: [sidecar]
  sidecar:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
"""


def write_task(root: Path, compose: bool = False) -> Path:
    task = root / "bench-task"
    for folder in ("environment", "solution", "tests"):
        (task / folder).mkdir(parents=True, exist_ok=True)
    (task / "task.toml").write_text(
        "[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n"
        '[environment]\nnetwork_mode = "no-network"\n'
    )
    (task / "instruction.md").write_text("Write done to /app/out.txt\n")
    (task / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    (task / "solution" / "solve.sh").write_text(SOLVE)
    (task / "tests" / "test.sh").write_text(TEST)
    if compose:
        (task / "environment" / "docker-compose.yaml").write_text(COMPOSE)
    return task


def archive(name: str, text: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        data = text.encode()
        info = tarfile.TarInfo(name)
        info.size, info.mode = len(data), 0o755
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def run(container, argv: list[str]) -> int:
    """exec_run, then wait until the engine records the exit code: under load the output stream of a
    command can end before it does (the container environment waits the same way)."""
    api = container.client.api
    exec_id = api.exec_create(container.id, argv)["Id"]
    api.exec_start(exec_id)
    while (state := api.exec_inspect(exec_id)).get("Running"):
        time.sleep(0.01)
    return int(state["ExitCode"])


def plain_attempt(client: docker.DockerClient, image: str, compose: bool = False) -> float:
    """The same steps with the SDK and nothing else, the container made as Harbor's docker environment
    makes it (the image's entrypoint kept, the command `sh -c "sleep infinity"`, the image's user, Docker's
    default capabilities); returns the reward. With `compose`, on a network of its own with a sidecar."""
    network = sidecar = None
    if compose:
        network = client.networks.create(f"bench-{os.urandom(6).hex()}", driver="bridge", internal=True)
        sidecar = client.containers.create(
            "debian:bookworm-slim",
            command=["sleep", "infinity"],
            network=network.name,
            networking_config={network.name: client.api.create_endpoint_config(aliases=["sidecar"])},
            mem_limit=2048 * 1024 * 1024,
            pids_limit=1024,
            log_config={"type": "none", "config": {}},
        )
        sidecar.start()
    container = client.containers.create(
        image,
        command=["sh", "-c", "sleep infinity"],
        network=network.name if network else "none",
        mem_limit=2048 * 1024 * 1024,
        memswap_limit=2048 * 1024 * 1024,
        pids_limit=1024,
        log_config={"type": "none", "config": {}},
    )
    try:
        container.start()
        run(container, ["mkdir", "-p", "/logs/verifier", "/solution", "/tests"])
        container.put_archive("/solution", archive("solve.sh", SOLVE))
        run(container, ["bash", "-c", "/solution/solve.sh > /logs/oracle.txt 2>&1"])
        container.put_archive("/tests", archive("test.sh", TEST))
        run(container, ["bash", "-c", "/tests/test.sh > /logs/verifier/test-stdout.txt 2>&1"])
        stream, _ = container.get_archive("/logs/verifier/reward.txt")
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            member = tar.next()
            assert member is not None
            content = tar.extractfile(member)
            return float(content.read()) if content else 0.0
    finally:
        container.remove(force=True)
        if sidecar is not None:
            sidecar.remove(force=True)
        if network is not None:
            network.remove()


async def plain_round(
    client: docker.DockerClient, image: str, attempts: int, concurrency: int, compose: bool = False
) -> float:
    gate = asyncio.Semaphore(concurrency)

    async def one() -> float:
        async with gate:
            return await asyncio.to_thread(plain_attempt, client, image, compose)

    started = time.perf_counter()
    rewards = await asyncio.gather(*(one() for _ in range(attempts)))
    elapsed = time.perf_counter() - started
    assert rewards == [1.0] * attempts, rewards
    return attempts / elapsed


async def environment_round(task: Path, work: Path, attempts: int, concurrency: int, label: str) -> float:
    from regatta_executor.attempt.trials import run_trial
    from regatta_executor.container.engine import CONTAINER_ENVIRONMENT

    gate = asyncio.Semaphore(concurrency)

    async def one(index: int) -> float:
        config = {
            "task": {"path": str(task)},
            "trial_name": f"{label}-{index}",
            "trials_dir": str(work / "trials"),
            "agent": {"name": "oracle"},
            "environment": {
                "import_path": CONTAINER_ENVIRONMENT,
                "delete": True,
                "kwargs": {"state_dir": str(work / "state"), "local_images": LOCAL_IMAGES},
            },
        }
        async with gate:
            result = await run_trial(config)
        reward = (result.get("verifier_result") or {}).get("rewards", {}).get("reward", -1.0)
        if reward != 1.0:
            print(f"{label}-{index}: {(result.get('exception_info') or {}).get('exception_traceback')}")
        return reward

    started = time.perf_counter()
    rewards = await asyncio.gather(*(one(index) for index in range(attempts)))
    elapsed = time.perf_counter() - started
    assert rewards == [1.0] * attempts, rewards
    return attempts / elapsed


async def main(attempts: int, concurrency: int, rounds: int, compose: bool = False) -> None:
    os.environ.setdefault("HARBOR_TELEMETRY", "0")
    work = Path(tempfile.mkdtemp(prefix="bench-containers-"))
    task = write_task(work, compose)
    # Warm-up: builds (or finds) the task's image, imports Harbor, sweeps, makes the state folder.
    await environment_round(task, work, 1, 1, "warm-up")
    from regatta_executor.container.image.task_images import IMAGE_REPOSITORY, ImageCache

    client = docker.from_env(max_pool_size=64)
    cache = ImageCache(client, work / "state", None, local_images=LOCAL_IMAGES)
    image = f"{IMAGE_REPOSITORY}:{cache.digest(task / 'environment')}"
    await plain_round(client, image, 1, 1, compose)
    ours, plain = [], []
    index = 0
    while len(ours) < rounds:
        index += 1
        try:
            mine = await environment_round(task, work, attempts, concurrency, f"round{index}")
            theirs = await plain_round(client, image, attempts, concurrency, compose)
        except Exception as exc:  # a round hit by an engine fault is run again, and says so
            if index >= rounds + 3:
                raise
            print(f"round {index} failed and is run again: {type(exc).__name__}: {str(exc)[:200]}")
            continue
        ours.append(mine)
        plain.append(theirs)
        print(f"round {index}: container environment {mine:.2f}/s, plain SDK {theirs:.2f}/s")
    ratios = [a / b for a, b in zip(ours, plain, strict=True)]
    print(
        f"{'compose task (main + sidecar)' if compose else 'one-container task'}: "
        f"{attempts} attempts at concurrency {concurrency}, {rounds} rounds; load average "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores\n"
        f"container environment: {statistics.median(ours):.2f} attempts/s (median)\n"
        f"plain docker SDK:      {statistics.median(plain):.2f} attempts/s (median)\n"
        f"ratio: {statistics.median(ratios):.2f}x (rounds {min(ratios):.2f}-{max(ratios):.2f}); goal >= 0.9x"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--attempts", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--compose", action="store_true", help="a two-service docker-compose.yaml task")
    args = parser.parse_args()
    asyncio.run(main(args.attempts, args.concurrency, args.rounds, args.compose))
