"""Issue 2: one real run through the whole system, crash of an executor, and projection rebuild."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import httpx
from regatta_gateway.readmodels.tables import metadata as read_model_tables
from sqlalchemy import create_engine, text

from tests.e2e.web_ui_support import ACK_WAIT

ROOT = Path(__file__).resolve().parents[2]
DEMO = (ROOT / "examples" / "runs" / "demo.toml").read_text()


def _metrics_by_harness(detail: dict) -> dict[str, dict]:
    agents = {a["id"]: a for a in detail["agents"]}
    return {agents[m["benchmark_run_agent_id"]]["harness"]: m for m in detail["agent_metrics"]}


def test_demo_run_goes_pending_queued_running_finished(shared_stack, api_for) -> None:
    stack = shared_stack(executors=1, **ACK_WAIT)
    api = api_for(stack)
    benchmark = api.benchmark_ready("regatta-examples")
    assert benchmark["sync_status"] == "ready"
    created = api.submit_toml(DEMO)
    assert created["status"] == "pending"
    detail = api.wait_run(created["id"])
    assert detail["benchmark_run"]["status"] == "finished"
    steps = [entry["step"] for entry in api.all_logs(created["id"])]
    lifecycle = [s for s in steps if s in ("submit", "queue", "start", "finish")]
    assert lifecycle == ["submit", "queue", "start", "finish"]
    metrics = _metrics_by_harness(detail)
    oracle, nop = metrics["oracle"], metrics["nop"]
    tasks = benchmark["task_count"]
    assert oracle["pass_at_1"]["value"] == 1.0 and oracle["pass_at_1"]["n"] == tasks
    assert nop["pass_at_1"]["value"] == 0.0 and nop["pass_at_1"]["n"] == tasks
    assert 0 < oracle["pass_at_1"]["ci_low"] < 1.0 == oracle["pass_at_1"]["ci_high"]
    assert nop["pass_at_1"]["ci_low"] == 0.0 < nop["pass_at_1"]["ci_high"] < 1
    assert (oracle["rank"], nop["rank"]) == (1, 2)
    assert detail["progress"] == {"ingested": tasks * 2 * 2, "expected": tasks * 2 * 2}


def _write_slow_tasks(root: Path, count: int) -> None:
    for index in range(count):
        task = root / f"slow-{index}"
        for folder in ("tests", "solution", "environment"):
            (task / folder).mkdir(parents=True)
        (task / "task.toml").write_text(
            '[metadata]\ncategory = "slow"\n[agent]\ntimeout_sec = 60\n'
            '[verifier]\ntimeout_sec = 60\n[environment]\nnetwork_mode = "no-network"\n'
        )
        (task / "instruction.md").write_text("Write done to /app/out.txt\n")
        (task / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
        (task / "solution" / "solve.sh").write_text("#!/bin/bash\nsleep 1.5\necho done > /app/out.txt\n")
        (task / "tests" / "test.sh").write_text(
            "#!/bin/bash\nif grep -q done /app/out.txt 2>/dev/null; then echo 1; else echo 0; fi"
            " > /logs/verifier/reward.txt\n"
        )


def test_executor_killed_mid_run_finishes_with_every_attempt_once(make_stack, api_for, tmp_path) -> None:
    tasks = tmp_path / "slow-tasks"
    _write_slow_tasks(tasks, 6)
    stack = make_stack(executors=1, REGATTA_JOB_ACK_WAIT="3")
    api = api_for(stack)
    response = api.http.post(
        "/api/v1/benchmarks", json={"source_type": "folder", "path": str(tasks), "name": "slow"}
    )
    assert response.status_code == 201, response.text
    api.benchmark_ready("slow")
    config = (
        '[experiment]\nbenchmark = "slow"\n[[agents]]\nharness = "oracle"\n[agents.model]\ntype = "hosted"\n'
        'base_model = "none"\n[execution]\nattempts_per_task = 2\nmax_concurrent_attempts = 4\n'
    )
    created = api.submit_toml(config)
    api.wait_for(
        lambda: any(a["status"] == "running" for a in api.get(f"/runs/{created['id']}/attempts")["attempts"])
    )
    stack.kill("executor-1")
    progress = api.get(f"/runs/{created['id']}")["progress"]
    assert progress["ingested"] < progress["expected"], "the executor was killed after the run ended"
    stack.restart("executor-1")
    detail = api.wait_run(created["id"])
    assert detail["benchmark_run"]["status"] == "finished"
    assert detail["progress"] == {"ingested": 12, "expected": 12}
    engine = create_engine(stack.database_url)
    with engine.connect() as conn:
        finished = [
            row[0]
            for row in conn.execute(
                text(
                    "SELECT data->>'attempt_id' FROM events WHERE type = 'AttemptFinished' AND stream_id = :s"
                ),
                {"s": f"run-{created['id']}"},
            )
        ]
        duplicates = conn.execute(text("SELECT count(*) - count(DISTINCT event_id) FROM events")).scalar_one()
    engine.dispose()
    assert len(finished) == 12
    assert Counter(finished).most_common(1)[0][1] == 1
    assert duplicates == 0
    assert _metrics_by_harness(detail)["oracle"]["pass_at_1"]["value"] == 1.0


def _dump(url: str) -> dict[str, list]:
    engine = create_engine(url)
    dump = {}
    with engine.connect() as conn:
        for table in read_model_tables.sorted_tables:
            rows = conn.execute(table.select()).mappings().all()
            dump[table.name] = sorted(repr(sorted(dict(r).items())) for r in rows)
    engine.dispose()
    return dump


def test_projections_rebuild_reproduces_read_models(make_stack, api_for) -> None:
    stack = make_stack(executors=1)
    api = api_for(stack)
    api.benchmark_ready("regatta-examples")
    detail = api.wait_run(api.submit_toml(DEMO)["id"])
    assert detail["benchmark_run"]["status"] == "finished"
    api.wait_for(lambda: api.get("/benchmarks/regatta-examples/leaderboard")["leaderboard"])
    stack.kill("gateway")  # the live projection must not race the rebuild
    before = _dump(stack.database_url)
    assert before["rm_runs"] and before["rm_attempts"] and before["rm_leaderboards"]
    env = {**os.environ, "DATABASE_URL": stack.database_url}
    result = subprocess.run(
        [sys.executable, "-m", "regatta.cli", "projections", "rebuild"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "Rebuilt read models" in result.stdout
    assert _dump(stack.database_url) == before


def test_every_service_answers_its_health_check(shared_stack) -> None:
    stack = shared_stack(executors=1, **ACK_WAIT)
    assert set(stack.health_ports) == {"registry-sync", "run-scheduler", "scoring", "executor-1"}
    for key, port in stack.health_ports.items():
        response = httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)
        assert response.status_code in (200, 204), key
    assert httpx.get(f"{stack.url}/health", timeout=5).json() == {"status": "ok", "relay_set_aside": 0}
    assert httpx.get(f"{stack.url}/openapi.json", timeout=5).json()["openapi"].startswith("3.1")


def test_cli_submit_wait_prints_the_results_table(shared_stack, api_for) -> None:
    stack = shared_stack(executors=1, **ACK_WAIT)
    api_for(stack).benchmark_ready("regatta-examples")
    env = {
        **os.environ,
        "REGATTA_URL": stack.url,
        "REGATTA_TOKEN": stack.token,
        "REGATTA_WORKSPACE": stack.workspace,
        "COLUMNS": "200",
    }
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "regatta.cli",
            "run",
            "submit",
            str(ROOT / "examples/runs/demo.toml"),
            "--wait",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert ": finished" in result.stdout
    lines = {line.split("│")[2].strip(): line for line in result.stdout.splitlines() if line.count("│") > 4}
    oracle = next(line for agent, line in lines.items() if agent.startswith("oracle"))
    nop = next(line for agent, line in lines.items() if agent.startswith("nop"))
    assert "100.0% (72.2%–100.0%)" in oracle
    assert "0.0% (0.0%–27.8%)" in nop


def test_a_service_whose_picked_port_was_taken_starts_on_another(tmp_path: Path) -> None:
    """Ports are picked free well before a loaded machine's service binds them; one taken meanwhile
    (here by a listener of the test's own) is picked again rather than failing the start."""
    import socket

    from tests.e2e.conftest import _new_stack, _start

    taken = [socket.socket(), socket.socket()]
    for sock in taken:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
    health_taken, gateway_taken = (sock.getsockname()[1] for sock in taken)
    stack = _new_stack(tmp_path / "stack", "", 1, {})
    stack.database_url = None
    stack.health_ports["scoring"] = health_taken
    stack.port = gateway_taken
    try:
        _start(stack)
        assert stack.health_ports["scoring"] != health_taken
        assert stack.port != gateway_taken
        assert httpx.get(f"http://127.0.0.1:{stack.health_ports['scoring']}/health", timeout=5).is_success
        assert httpx.get(f"{stack.url}/health", timeout=5).json()["status"] == "ok"
        logs = (stack.logs / "scoring.log").read_text() + (stack.logs / "gateway.log").read_text()
        assert logs.count("address already in use") >= 2
    finally:
        stack.stop()
        for sock in taken:
            sock.close()
