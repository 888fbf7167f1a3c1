"""Issue 38, Watch under the `container` environment, in a real browser: a line the agent prints inside its
container appears on the attempt's page while the attempt still runs. The agent prints it, then waits for a
file that only the test makes (in the container, through the engine), so the line is proven shown before
the attempt could end; the test then lets it finish and the page shows the outcome."""

from __future__ import annotations

import re
import secrets
from pathlib import Path

import docker
import pytest
from playwright.sync_api import Page, expect

from tests.e2e.test_container_stack import container_stack, containers
from tests.e2e.test_container_watch import engine  # noqa: F401 (the fixture: the machine's Docker engine)
from tests.e2e.web_ui_layout import assert_readable
from tests.e2e.web_ui_support import ACK_WAIT, LONG, add_folder_benchmark, sign_in
from tests.support.tasks import write_task

pytestmark = pytest.mark.timeout(400)

GO = "/tmp/regatta-go"
LINE = "hello from inside the container " + secrets.token_hex(4)
# The line, then a wait (bounded: 240 s) for the file the test makes; then the task's work.
SOLVE = f"""echo "{LINE}"
for _ in $(seq 2400); do [ -e {GO} ] && break; sleep 0.1; done
[ -e {GO} ] && echo "let go by the test"
echo done > /app/out.txt"""


def test_a_container_attempts_line_shows_on_its_page_before_the_attempt_ends(
    engine: docker.DockerClient,  # noqa: F811
    make_stack,
    api_for,
    page: Page,
    tmp_path: Path,
) -> None:
    stack, owners = container_stack(make_stack, tmp_path, **ACK_WAIT)
    api = api_for(stack)
    write_task(tmp_path / "held", "held-000", solve=SOLVE)
    add_folder_benchmark(api, tmp_path / "held", "held")
    api.benchmark_ready("held")
    body = {
        "name": "held-in-a-container",
        "experiment_config": {"benchmark": "held"},
        "agents": [{"harness": "oracle", "model": {"type": "hosted", "base_model": "none"}}],
        "execution_config": {"attempts_per_task": 1},
    }
    created = api.http.post("/api/v1/runs", json=body)
    assert created.status_code == 201, created.text
    run_id = created.json()["id"]
    attempt = api.wait_for(
        lambda: next(
            (a for a in api.get(f"/runs/{run_id}/attempts")["attempts"] if a["status"] == "running"), None
        ),
        timeout=180,
    )

    sign_in(page, stack)
    page.goto(f"{stack.url}/benchmarks/runs/{run_id}/attempts/{attempt['attempt_id']}")
    output = page.get_by_test_id("live-output")
    expect(output).to_contain_text(LINE, timeout=LONG)
    # Shown while the agent still waits in its container: no outcome, and the page says it is running.
    assert api.get(f"/runs/{run_id}/attempts")["attempts"][0]["outcome"] is None, "shown before the end"
    expect(page.get_by_test_id("attempt-phase")).to_have_text("agent running")
    expect(output).not_to_contain_text("let go by the test")
    assert_readable(page, "container-watch-running", [LINE])

    # The test lets the agent go, in its container; the page follows the attempt to its end.
    (running,) = [c for c in containers(engine, owners) if c["State"] == "running"]
    made = engine.containers.get(running["Id"]).exec_run(["touch", "--", GO])
    assert made.exit_code == 0, made.output
    expect(page.get_by_test_id("attempt-state")).to_have_text("passed", timeout=LONG)
    expect(page.get_by_test_id("attempt-phase")).to_have_text("ended")
    assert api.wait_run(run_id, timeout=120)["benchmark_run"]["status"] == "finished"
    agent_log = api.artifact_texts(run_id)
    assert re.search(r"let go by the test", agent_log), agent_log
