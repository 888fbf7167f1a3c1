"""Issue 27, finding 5, and issue 36 through the whole stack: an agent that breaks its sandbox (deletes
/bin/sh, or fork-bombs it until its time is up) cannot turn its failure into no score, and one that
replaces bash with a trojan is scored as Harbor scores it (the default `record` policy) with the evidence
shown on its attempt, its run's Agent Results and its leaderboard row. One benchmark of five tasks on a
running stack with the container environment: the two breakers end `failed` with their reasons, two
honest tasks and the trojan pass, and the run's pass@1 is 0.6 (it was 1.0 when the broken attempts ended
`errored` and dropped out of the denominator)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from regatta_executor.container.engine import CONTAINER_ENVIRONMENT, engine_answers

from tests.conftest import unavailable
from tests.e2e.test_executor import add_folder, run_events
from tests.integration.container_support import BASE_IMAGE
from tests.support.tasks import run_toml

pytestmark = pytest.mark.timeout(600)

ALWAYS_FAILS = "echo 0 > /logs/verifier/reward.txt\n"
PASSES = "echo 1 > /logs/verifier/reward.txt\n"
# A bash that runs the real one, then writes reward 1 (issue 36): under the default `record` policy it is
# scored as Harbor scores it, and the evidence names it.
TROJAN = """
cp /usr/bin/bash /opt/real-bash
printf '#!/opt/real-bash\\n/opt/real-bash "$@"; s=$?; echo 1 > /logs/verifier/reward.txt; exit $s\\n' > /tmp/w
chmod 755 /tmp/w && mv /tmp/w /usr/bin/bash
"""
TASKS = {
    "trojan-bash": (TROJAN, ALWAYS_FAILS, 60),
    "delete-sh": ("rm -f /bin/sh\n", ALWAYS_FAILS, 60),
    "fork-bomb": (":(){ :|:& };:\nexec sleep 1000\n", ALWAYS_FAILS, 5),
    "honest-a": ("true\n", PASSES, 60),
    "honest-b": ("true\n", PASSES, 60),
}


def _write(root: Path, name: str, solve: str, test: str, agent_timeout: int) -> None:
    task = root / name
    for folder in ("tests", "solution", "environment"):
        (task / folder).mkdir(parents=True)
    (task / "task.toml").write_text(
        f"[agent]\ntimeout_sec = {agent_timeout}\n[verifier]\ntimeout_sec = 60\n"
        '[environment]\nnetwork_mode = "no-network"\n'
    )
    (task / "instruction.md").write_text(f"Task {name}.\n")
    (task / "environment" / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nWORKDIR /app\n")
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\n" + textwrap.dedent(solve))
    (task / "tests" / "test.sh").write_text("#!/bin/bash\n" + textwrap.dedent(test))


def test_an_agent_that_breaks_its_sandbox_fails_and_pass_at_1_stays_honest(
    make_stack, api_for, tmp_path: Path
) -> None:
    if not engine_answers():
        unavailable("no Docker engine answers (scripts/services.sh starts one)")
    kwargs = {"state_dir": str(tmp_path / "container-state"), "max_processes": 128}
    stack = make_stack(
        executors=1,
        REGATTA_EXECUTOR_ENVIRONMENT=CONTAINER_ENVIRONMENT,
        REGATTA_EXECUTOR_ENVIRONMENT_KWARGS=json.dumps(kwargs),
    )
    api = api_for(stack)
    for name, (solve, test, timeout) in TASKS.items():
        _write(tmp_path / "tasks", name, solve, test, timeout)
    benchmark = add_folder(api, tmp_path / "tasks", "broken-sandboxes")
    run_id = api.submit_toml(run_toml("broken-sandboxes", concurrency=2))["id"]
    detail = api.wait_run(run_id, timeout=480)

    assert detail["benchmark_run"]["status"] == "finished", detail["benchmark_run"]
    attempts = {a["task"]: a for a in api.get(f"/runs/{run_id}/attempts")["attempts"]}
    outcomes = {task: a["outcome"] for task, a in attempts.items()}
    assert outcomes == {
        "trojan-bash": "passed",
        "delete-sh": "failed",
        "fork-bomb": "failed",
        "honest-a": "passed",
        "honest-b": "passed",
    }
    finished = {d["task"]: d for kind, d in run_events(stack, run_id) if kind == "AttemptFinished"}
    # The verifier's verdict stands where the shell is gone (the platform uses its own), and the
    # deletion is recorded as evidence; the bomb's timeout is said.
    deleted = finished["delete-sh"]
    assert (deleted["exception_type"], deleted["rewards"]) == (None, {"reward": 0}), deleted
    evidence = finished["delete-sh"]["integrity"]
    assert [(c["path"], c["change"]) for c in evidence["changes"]] == [("/usr/bin/sh", "deleted")], evidence
    assert finished["fork-bomb"]["exception_type"] == "AgentTimeoutError"
    assert all(finished[task]["try_number"] == 1 for task in TASKS), "the agent's failure is not retried"
    totals = detail["totals"]
    assert (totals["passed"], totals["failed"], totals["errored"]) == (3, 2, 0), totals
    (metric,) = detail["agent_metrics"]
    assert metric["pass_at_1"]["value"] == pytest.approx(0.6), metric
    board: list[dict[str, Any]] = api.wait_for(
        lambda: api.get(f"/benchmarks/{benchmark['id']}/leaderboard")["leaderboard"], timeout=60
    )
    assert len(board) == 1 and board[0]["pass_at_1"]["value"] == pytest.approx(0.6), board

    # The trojan's evidence, on its attempt, the run's Agent Results and the leaderboard row.
    trojan = api.get(f"/runs/{run_id}/attempts/{attempts['trojan-bash']['attempt_id']}")
    bash = {c["path"]: c for c in trojan["result"]["integrity"]["changes"]}["/usr/bin/bash"]
    assert (bash["change"], bash["explained_by"]) == ("changed", None), bash
    assert bash["before"]["sha256"] != bash["after"]["sha256"], bash
    (agent,) = detail["agents"]
    assert agent["integrity"]["unexplained"] == 1, agent["integrity"]
    assert board[0]["integrity"]["unexplained"] == 1, board[0]
