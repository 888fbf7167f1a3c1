"""Issue 28, item 1a, in the New Run form and the CLI: a run whose terminus-2 agent names a provider
model that litellm does not list is submitted, and the form (before leaving for the run page) and
`regatta run submit` (on stderr) say so."""

from __future__ import annotations

import json
import re

from playwright.sync_api import Page, expect

from tests.e2e.web_ui_layout import assert_readable
from tests.e2e.web_ui_support import sign_in


def test_the_new_run_form_shows_the_submission_s_model_warning(shared_stack, api_for, page: Page) -> None:
    stack = shared_stack(executors=0)
    api = api_for(stack)
    api.benchmark_ready("regatta-examples")
    body = {"name": "WARN_KEY", "value": "sk-test", "scope": "workspace"}
    response = api.http.post("/api/v1/secrets", json=body)
    assert response.status_code == 201, response.text
    sign_in(page, stack)

    page.get_by_role("link", name="regatta-examples").first.click()
    page.get_by_role("link", name="New Run").click()
    page.get_by_role("tab", name="Agents").click()
    agent = page.locator("[data-agent]").nth(0)
    agent.get_by_label("Harness", exact=True).select_option("terminus-2")
    agent.get_by_label("Model", exact=True).select_option("provider")
    agent.get_by_label("Model name").fill("openai/gpt-9-no-such-model")
    agent.get_by_label("API key secret record").fill("WARN_KEY")
    page.get_by_role("button", name="Submit run").click()

    warning = page.get_by_test_id("submit-warning")
    expect(warning).to_contain_text("Run submitted, with warnings")
    expect(warning).to_contain_text("'openai/gpt-9-no-such-model'")
    expect(warning).to_contain_text("'terminus-2'")
    expect(page.get_by_test_id("submit-error")).to_be_hidden()
    assert_readable(page, "new-run-model-warning", ["Open the run"], scroll_to="[data-testid=submit-warning]")
    page.get_by_test_id("open-run").click()
    expect(page).to_have_url(re.compile(r"/benchmarks/runs/run_"))


def test_regatta_run_submit_prints_the_warning_on_stderr(shared_stack, api_for, tmp_path) -> None:
    from tests.e2e.test_cli import regatta

    stack = shared_stack(executors=0)
    api = api_for(stack)
    api.benchmark_ready("regatta-examples")
    body = {"name": "WARN_KEY", "value": "sk-test", "scope": "workspace"}
    assert api.http.post("/api/v1/secrets", json=body).status_code == 201
    config = tmp_path / "run.toml"
    config.write_text(
        '[experiment]\nbenchmark = "regatta-examples"\n[[agents]]\nharness = "terminus-2"\n'
        '[agents.model]\ntype = "provider"\nmodel = "openai/gpt-9-no-such-model"\n'
        'api_key_secret = "WARN_KEY"\n'
    )
    submitted = regatta(stack, "run", "submit", str(config), "--json")
    assert submitted.returncode == 0, submitted.stderr
    created = json.loads(submitted.stdout)  # stdout stays one JSON document
    assert created["warnings"] and "openai/gpt-9-no-such-model" in created["warnings"][0]
    assert "Warning: agent 1: model 'openai/gpt-9-no-such-model'" in submitted.stderr, submitted.stderr
    assert "'terminus-2'" in submitted.stderr
