"""Issue 27 through the whole stack: the container environment's boundary against a task author in
another workspace of one deployment, every attack as written in the issue, on a running stack (real
nats-server, Postgres, every service its own process) with a real engine.

Workspace B (the attacker) and workspace A (the victim) share the stack and its engine:
1. B first builds a context equal to A's but for `environment/.git/x` (finding 3), hoping A is
   then served B's image "cached".
2. A runs its task, whose image holds a hidden file; A must get an image of its own and pass.
3. B runs a benchmark of attacks: `ADD` from a host-only listener and an image pulled from it (1);
   A's image by id prefix, by its platform tag and as FROM (2); a bash that writes reward 1 after the
   test (4); 1 GiB written under a 64 MiB storage cap (6); a task asking for a 1 TiB memory limit and
   1 PiB of storage, more than the engine's disk (7), and one holding a 1 GiB file (8), which the sync
   lists invalid; and one honest task.
Each attack fails with its reason; nothing of A's hidden file, of B's poison or of the listener's
answer is in any stored artifact or download; the scores are the honest ones and every service is
alive and healthy afterwards. (Finding 5 through the stack: test_verifier_integrity_stack.py.)
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from regatta_executor.container.engine import CONTAINER_ENVIRONMENT, engine_answers
from regatta_executor.container.image.task_images import IMAGE_REPOSITORY

from regatta.stack import Stack
from tests.conftest import unavailable
from tests.e2e.conftest import Api, Tenant
from tests.e2e.test_executor import add_folder, run_events
from tests.e2e.test_hostile_stack import _stored
from tests.integration.container_support import BASE_IMAGE, images_built_are_removed, write_task
from tests.integration.executor.container.test_container_image_boundary import Listener
from tests.integration.executor.container.test_container_verifier_integrity import ALWAYS_FAILS, WRAPPER
from tests.support.tasks import run_toml

pytestmark = pytest.mark.timeout(900)

PASSES = "echo 1 > /logs/verifier/reward.txt\n"
GIB = 1024**3


@pytest.fixture
def listener() -> Iterator[Listener]:
    served = Listener()
    yield served
    served.close()


def _task(
    root: Path, name: str, *, solve: str = "true\n", test: str = PASSES, dockerfile: str | None = None,
    environment: str = "",
) -> Path:  # fmt: skip
    """An ad-hoc task; without `dockerfile`, one that has none (its image named by `docker_image`)."""
    task = write_task(
        root,
        name,
        solve=solve,
        test=test,
        dockerfile=dockerfile,
        environment=environment,
        agent_timeout_sec=120,
    )
    if dockerfile is None:
        (task / "environment" / "Dockerfile").unlink()
    return task


def _public(root: Path, poison: str | None = None) -> None:
    """A's public task (anyone may read its files). With `poison`, B's copy of it: the same bytes plus
    `environment/.git/x`, a path the old cache digest skipped (`__pycache__`, which it skipped too,
    never reaches an executor: the sync's packaging drops it)."""
    task = _task(
        root,
        "public",
        solve="ls -laR /ctx > /logs/artifacts/ctx.txt\n",
        # A's own check: its image is the one its context makes, with nothing of anyone else's in it.
        test="if [ -e /ctx/.git ]; then echo 0; else echo 1; fi > /logs/verifier/reward.txt\n",
        dockerfile=f"FROM {BASE_IMAGE}\nCOPY . /ctx\nWORKDIR /app\n",
    )
    (task / "environment" / "app.py").write_text("print('the same for everyone')\n")
    if poison is not None:
        (task / "environment" / ".git").mkdir()
        (task / "environment" / ".git" / "x").write_text(poison + "\n")


def _private(root: Path, hidden: str) -> None:
    """A's private task: its image holds a file only A's tasks should ever see."""
    task = _task(
        root,
        "private",
        test="if [ -s /hidden ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n",
        dockerfile=f"FROM {BASE_IMAGE}\nCOPY hidden.txt /hidden\nRUN chmod 600 /hidden\nWORKDIR /app\n",
    )
    (task / "environment" / "hidden.txt").write_text(hidden + "\n")


def _workspace(stack: Stack, name: str) -> Tenant:
    with httpx.Client(base_url=stack.url, headers={"Authorization": f"Bearer {stack.token}"}) as http:
        created = http.post("/api/v1/workspaces", json={"name": name})
    assert created.status_code == 201, created.text
    return Tenant(stack, name, created.json()["id"])


def _run(api: Api, benchmark: str, concurrency: int = 3) -> tuple[str, dict, dict[str, dict]]:
    run_id = api.submit_toml(run_toml(benchmark, concurrency=concurrency))["id"]
    detail = api.wait_run(run_id, timeout=480)
    assert detail["benchmark_run"]["status"] == "finished", detail["benchmark_run"]
    attempts = {a["task"]: a for a in api.get(f"/runs/{run_id}/attempts")["attempts"]}
    return run_id, detail, attempts


def _downloads(api: Api, run_id: str) -> dict[str, bytes]:
    manifest = api.get(f"/runs/{run_id}/downloads", types="all")
    got = {}
    for item in manifest["files"]:
        response = api.http.get(item["url"])  # a signed URL, relative to the stack's
        assert response.status_code == 200, item["path"]
        got[item["path"]] = response.content
    return got


@pytest.fixture
def container_stack(make_stack, tmp_path: Path) -> Iterator[Stack]:
    if not engine_answers():
        unavailable("no Docker engine answers (scripts/services.sh starts one)")
    with images_built_are_removed(tmp_path):
        yield make_stack(
            executors=1,
            REGATTA_EXECUTOR_ENVIRONMENT=CONTAINER_ENVIRONMENT,
            REGATTA_EXECUTOR_ENVIRONMENT_KWARGS=json.dumps({"state_dir": str(tmp_path / "container-state")}),
        )


def test_tasks_of_another_workspace_cannot_cross_the_container_boundary(
    container_stack: Stack, tmp_path: Path, listener: Listener
) -> None:
    stack = container_stack
    victim, attacker = Api(_workspace(stack, "victim")), Api(_workspace(stack, "attacker"))
    hidden, poison = f"hidden-{secrets.token_hex(12)}", f"poison-{secrets.token_hex(12)}"

    # 1. B builds A's public context plus a file the old digest skipped, before A ever runs.
    _public(tmp_path / "b-first", poison)
    add_folder(attacker, tmp_path / "b-first", "lookalike")
    _, _, b_first = _run(attacker, "lookalike")
    assert b_first["public"]["outcome"] == "failed"  # B's own image: /ctx/.git is there

    # 2. A's run gets the images of its own contexts, not B's "cached" one, and passes.
    _public(tmp_path / "a")
    _private(tmp_path / "a", hidden)
    add_folder(victim, tmp_path / "a", "mine")
    a_run, _, a_attempts = _run(victim, "mine")
    assert {task: a["outcome"] for task, a in a_attempts.items()} == {"public": "passed", "private": "passed"}
    a_public, b_public = a_attempts["public"]["result"]["image"], b_first["public"]["result"]["image"]
    assert a_public["source"] == "built" and a_public["reference"].startswith(f"{IMAGE_REPOSITORY}:")
    assert a_public["image_id"] != b_public["image_id"] and a_public["reference"] != b_public["reference"]
    a_image = a_attempts["private"]["result"]["image"]

    # 3. B's attacks.
    nonce = secrets.token_hex(8)
    steal = "cat /hidden /ctx/* > /logs/artifacts/stolen.txt 2>&1\n"
    attacks = tmp_path / "b-attacks"
    _task(
        attacks,
        "add-host",
        dockerfile=f"FROM {BASE_IMAGE}\nADD http://127.0.0.1:{listener.port}/{nonce} /x\n",
    )
    _task(attacks, "pull-host", environment=f'docker_image = "127.0.0.1:{listener.port}/team/x:1"\n')
    prefix = a_image["image_id"].removeprefix("sha256:")[:4]
    _task(attacks, "id-prefix", solve=steal, environment=f'docker_image = "{prefix}"\n')
    _task(attacks, "platform-tag", solve=steal, environment=f'docker_image = "{a_image["reference"]}"\n')
    _task(attacks, "from-victim", solve=steal, dockerfile=f"FROM {a_image['reference']}\n")
    _task(
        attacks,
        "rig-bash",
        solve=WRAPPER + "mv /tmp/wrapper /usr/bin/bash\n",
        test=ALWAYS_FAILS,
        dockerfile=f"FROM {BASE_IMAGE}\nWORKDIR /app\n",
    )
    _task(
        attacks,
        "fill-layer",
        solve="head -c 1G /dev/zero > /var/tmp/fill\n",
        dockerfile=f"FROM {BASE_IMAGE}\nWORKDIR /app\n",
        environment="storage_mb = 64\n",
    )
    greedy = "memory_mb = 1048576\nstorage_mb = 1073741824\n"
    _task(attacks, "greedy", dockerfile=f"FROM {BASE_IMAGE}\n", environment=greedy)
    _task(attacks, "bomb", dockerfile=f"FROM {BASE_IMAGE}\n")
    with (attacks / "bomb" / "environment" / "zeros.bin").open("wb") as handle:
        handle.truncate(GIB)  # sparse: 1 GiB long
    _task(attacks, "honest", dockerfile=f"FROM {BASE_IMAGE}\nWORKDIR /app\n")

    # A bash that writes reward 1 is stopped by the `enforce` policy (under `record` it is evidence, as
    # the integrity tests show): the benchmark names it as its standard.
    (attacks / "regatta.toml").write_text('[benchmark]\nverifier_integrity = "enforce"\n')
    benchmark = attacker.get(f"/benchmarks/{add_folder(attacker, attacks, 'attacks')['id']}")["benchmark"]
    invalid = {t["name"]: t["invalid_reason"] for t in benchmark["tasks"] if t["invalid_reason"]}
    assert set(invalid) == {"greedy", "bomb"}, invalid
    assert re.fullmatch(
        r"task 'greedy': \[environment\]\.memory_mb = 1048576 exceeds the operator's ceiling of \d+ "
        r"\(REGATTA_MAX_MEMORY_MB\); \[environment\]\.storage_mb = 1073741824 exceeds the \d+ MiB of "
        r"this host's disk, the filesystem of the Docker engine's data root /\S+ "
        r"\(REGATTA_MAX_STORAGE_MB sets another ceiling\)",
        invalid["greedy"],
    ), invalid["greedy"]
    assert (
        invalid["bomb"].startswith("task 'bomb': its files pass")
        and "environment/zeros.bin" in invalid["bomb"]
    )
    b_run, detail, attempts = _run(attacker, "attacks")

    assert {task: a["outcome"] for task, a in attempts.items()} == {
        "add-host": "errored",
        "pull-host": "errored",
        "id-prefix": "errored",
        "platform-tag": "errored",
        "from-victim": "errored",
        "rig-bash": "failed",
        "fill-layer": "failed",
        "honest": "passed",
    }
    finished = {d["task"]: d for kind, d in run_events(stack, b_run) if kind == "AttemptFinished"}
    reason = {task: (d["exception_type"], d["exception_message"] or "") for task, d in finished.items()}
    assert reason["add-host"][0] == "DockerfileRefusedError"
    assert "environment/Dockerfile line 2: ADD" in reason["add-host"][1]
    assert "address not allowed" in reason["add-host"][1]
    kind, message = reason["pull-host"]
    assert kind == "ImageRefusedError", reason["pull-host"]
    assert f"'127.0.0.1:{listener.port}/team/x:1'" in message
    assert "refused (address not allowed unless REGATTA_OUTBOUND_ALLOW names it)" in message
    for task in ("id-prefix", "platform-tag", "from-victim"):
        kind, message = reason[task]
        assert kind in ("ImageRefusedError", "DockerfileRefusedError"), (task, kind)
        assert "image id" in message or "platform's own images" in message, (task, message)
    # A refusal is decided from the task's files: recorded once, never tried again.
    assert all(finished[task]["try_number"] == 1 for task in finished), reason
    assert (
        reason["rig-bash"][0] == "SandboxTamperedError" and "/usr/bin/bash (changed)" in reason["rig-bash"][1]
    )
    assert reason["fill-layer"][0] == "StorageLimitExceededError"
    assert re.fullmatch(r"storage limit exceeded \(\d+ MiB > 64 MiB\)", reason["fill-layer"][1]), reason
    # The honest numbers: two of the agent's failures scored, the refusals unscored.
    totals = detail["totals"]
    assert (totals["passed"], totals["failed"], totals["errored"]) == (1, 2, 5), totals
    (metric,) = detail["agent_metrics"]
    assert metric["pass_at_1"]["value"] == pytest.approx(1 / 3), metric

    # Nothing crossed: the listener was never asked, and no artifact or download holds A's hidden
    # file, B's poison in A's run, or the listener's answer.
    assert listener.requests == 0
    stored = asyncio.run(_stored(stack))
    assert stored, "the artifacts are in the object store"
    for needle in (hidden, listener.body):
        assert [name for name, data in stored.items() if needle.encode() in data] == [], needle[:12]
        for api, run_id in ((attacker, b_run), (victim, a_run)):
            leaked = [path for path, data in _downloads(api, run_id).items() if needle.encode() in data]
            assert leaked == [], (needle[:12], leaked)
    a_digests = {
        ref["digest"]
        for kind, d in run_events(stack, a_run)
        if kind == "AttemptFinished"
        for ref in d["artifacts"]
    }
    assert a_digests and not any(poison.encode() in stored.get(digest, b"") for digest in a_digests)

    # The platform is intact.
    assert all(process.poll() is None for process in stack.processes.values())
    for key, port in stack.health_ports.items():
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code in (200, 204), key
    assert httpx.get(f"{stack.url}/health", timeout=5).json() == {"status": "ok", "relay_set_aside": 0}
