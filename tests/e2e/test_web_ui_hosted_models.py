"""Issue 19, item 3: hosted models are the operator's OpenAI-compatible endpoints (REGATTA_HOSTED_MODELS).

A scripted OpenAI-compatible server (the only double) declared as a hosted model with a LoRA adapter and
a key serves a terminus-2 run submitted from the New Run form; an undeclared hosted model is refused at
submission, naming the field; a deployment that declares none does not offer the type at all.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from playwright.sync_api import Page, expect
from sqlalchemy import create_engine, text

from tests.conftest import EXAMPLES
from tests.e2e.web_ui_support import ACK_WAIT, LONG, phone_shot, shot, sign_in
from tests.support.scripted_llm import ScriptedLLM, terminus_reply

HOSTED_KEY = "sk-hosted-" + "0c9e2b7d41a6f583"
BASE = "Qwen/Qwen3-8B"
ADAPTER = "hello-lora"


def _hello_file(root: Path) -> Path:
    task = root / "hello-file"
    shutil.copytree(EXAMPLES / "tasks" / "hello-file", task)
    toml = task / "task.toml"
    # litellm's first import on a loaded 2-core machine takes longer than the task's 60 s agent timeout.
    toml.write_text(toml.read_text().replace("timeout_sec = 60", "timeout_sec = 300"))
    return root


def _add(api, root: Path, name: str) -> None:
    response = api.http.post(
        "/api/v1/benchmarks", json={"source_type": "folder", "path": str(root), "name": name}
    )
    assert response.status_code == 201, response.text
    assert api.benchmark_ready(name)["sync_status"] == "ready"


def _run_body(model: dict, harness: str = "terminus-2") -> dict:
    return {
        "experiment_config": {"benchmark": "t2"},
        "agents": [{"harness": harness, "model": model, "env": {}}],
    }


def _open_agents_tab(page: Page, stack) -> None:
    page.goto(f"{stack.url}/benchmarks")
    page.get_by_role("link", name="t2").first.click()
    page.get_by_role("link", name="New Run").click()
    expect(page.get_by_role("heading", name="New Run")).to_be_visible()
    page.get_by_role("tab", name="Agents").click()


def test_a_declared_hosted_model_serves_a_terminus2_run_from_the_new_run_form(
    make_stack, api_for, page: Page, tmp_path: Path
) -> None:
    script = [
        terminus_reply(["printf 'Hello, Regatta!\\n' > /app/hello.txt\n"], duration=2.0),
        terminus_reply(["cat /app/hello.txt\n"], duration=1.0),
        terminus_reply(task_complete=True),
        terminus_reply(task_complete=True),
    ]
    with ScriptedLLM(script, prompt_tokens=1000, completion_tokens=50) as llm:
        declared = [
            {
                "name": BASE,
                "base_url": llm.base_url,
                "api_key_env": "HOSTED_TEST_KEY",
                "lora_adapters": [ADAPTER],
            }
        ]
        # A long ack wait: the first terminus-2 attempt imports Harbor and litellm on the executor's event
        # loop, which on a loaded machine can miss heartbeats; a redelivered copy would take the script's
        # replies meant for the first.
        stack = make_stack(
            executors=1,
            REGATTA_HOSTED_MODELS=json.dumps(declared),
            HOSTED_TEST_KEY=HOSTED_KEY,
            REGATTA_JOB_ACK_WAIT="180",
        )
        api = api_for(stack)
        _add(api, _hello_file(tmp_path / "tasks"), "t2")

        # Users see what is declared by name; never its URL or its key's variable.
        listed = api.get("/hosted-models")
        assert listed == {"hosted_models": [{"name": BASE, "lora_adapters": [ADAPTER]}]}

        # Undeclared models and adapters are refused at submission, naming the field; nothing is recorded.
        before = api.get("/runs")["total_count"]
        refused = api.http.post("/api/v1/runs", json=_run_body({"type": "hosted", "base_model": "gpt-9"}))
        assert refused.status_code == 400, refused.text
        error = refused.json()
        assert error["field"] == "agents.0.model.base_model"
        assert error["message"] == (
            f"Invalid agents: agents.0.model.base_model: unknown hosted model 'gpt-9'; declared: {BASE}"
        )
        wrong_adapter = {"type": "hosted", "base_model": BASE, "lora_model_name": "other"}
        refused = api.http.post(
            "/api/cli/benchmark-runs",
            json=_run_body(wrong_adapter),
            headers={"X-Osmosis-Workspace": "default"},
        )
        assert refused.status_code == 400, refused.text
        assert refused.json()["field"] == "agents.0.model.lora_model_name"
        assert api.get("/runs")["total_count"] == before

        # The New Run form offers the declared model and its adapter; the run is submitted from it.
        sign_in(page, stack)
        _open_agents_tab(page, stack)
        agent = page.locator("[data-agent]").first
        agent.get_by_label("Harness", exact=True).select_option("terminus-2")
        model_type = agent.get_by_label("Model", exact=True)
        expect(model_type.locator("option:not([hidden])")).to_have_text(
            ["Provider model (your API key)", "OpenAI-compatible endpoint", "Hosted model"]
        )
        model_type.select_option("hosted")
        expect(agent.get_by_label("Hosted model")).to_have_value(BASE)
        expect(agent.get_by_label("API key secret record")).to_be_hidden()
        agent.get_by_label("LoRA adapter").select_option(ADAPTER)
        expect(page.get_by_test_id("run-summary")).to_contain_text(f"terminus-2 · {BASE}:{ADAPTER}")
        shot(page, "new-run-hosted-model")
        phone_shot(page, "new-run-hosted-model")
        page.get_by_role("button", name="Submit run").click()
        expect(page).to_have_url(re.compile(r"/benchmarks/runs/run_"), timeout=LONG)
        run_id = page.url.rsplit("/", 1)[1].split("?")[0]
        detail = api.wait_run(run_id, timeout=300)
        requests = list(llm.requests)
        authorizations = set(llm.authorizations)

    assert detail["benchmark_run"]["status"] == "finished", detail["benchmark_run"].get("status_reason")
    (attempt,) = api.get(f"/runs/{run_id}/attempts")["attempts"]
    assert attempt["outcome"] == "passed", attempt["result"]
    # The harness called the declared endpoint, for the adapter, with the operator's key.
    assert requests and {body["model"] for body in requests} == {ADAPTER}
    assert authorizations == {f"Bearer {HOSTED_KEY}"}
    assert attempt["result"]["usage"]["input_tokens"] >= 1000
    (agent_row,) = detail["agents"]
    assert (
        agent_row["model_ref"]["base_model"] == BASE and agent_row["model_ref"]["lora_model_name"] == ADAPTER
    )
    expect(page.get_by_test_id("run-status")).to_contain_text("finished", timeout=LONG)

    # The key is sealed into the run and never in clear in its events or its downloads.
    engine = create_engine(stack.database_url)
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT data FROM events WHERE stream_id = :s"), {"s": f"run-{run_id}"}
        ).all()
    engine.dispose()
    assert rows and all(HOSTED_KEY not in json.dumps(data) for (data,) in rows)
    manifest = api.get(f"/runs/{run_id}/downloads", types="all")
    assert manifest["files"]
    for item in manifest["files"]:
        assert HOSTED_KEY.encode() not in api.http.get(item["url"]).content, item["path"]


def test_without_declared_hosted_models_the_type_is_not_offered_and_refused_at_submission(
    shared_stack, api_for, page: Page, tmp_path: Path
) -> None:
    stack = shared_stack(executors=1, **ACK_WAIT)
    api = api_for(stack)
    _add(api, _hello_file(tmp_path / "tasks"), "t2")
    assert api.get("/hosted-models") == {"hosted_models": []}

    refused = api.http.post("/api/v1/runs", json=_run_body({"type": "hosted", "base_model": BASE}))
    assert refused.status_code == 400, refused.text
    error = refused.json()
    assert error["field"] == "agents.0.model"
    assert (
        "hosted models are not available: this deployment declares none (REGATTA_HOSTED_MODELS)"
        in (error["message"])
    )
    assert api.get("/runs")["total_count"] == 0, "refused at submission, never an error per attempt"
    # A harness that calls no model takes a hosted entry as a label: still accepted.
    label = api.http.post("/api/v1/runs", json=_run_body({"type": "hosted", "base_model": "none"}, "oracle"))
    assert label.status_code == 201, label.text

    sign_in(page, stack)
    _open_agents_tab(page, stack)
    agent = page.locator("[data-agent]").first
    agent.get_by_label("Harness", exact=True).select_option("terminus-2")
    model_type = agent.get_by_label("Model", exact=True)
    expect(model_type.locator("option:not([hidden])")).to_have_text(
        ["Provider model (your API key)", "OpenAI-compatible endpoint"]
    )
    expect(model_type.locator("option[value=hosted]")).to_have_count(0)
    # The no-model placeholder appears for a harness that calls none, and goes away again.
    agent.get_by_label("Harness", exact=True).select_option("nop")
    expect(model_type).to_have_value("none")
    expect(page.get_by_test_id("run-summary")).to_contain_text("nop")
    agent.get_by_label("Harness", exact=True).select_option("terminus-2")
    expect(model_type).to_have_value("provider")
    shot(page, "new-run-no-hosted-models")
