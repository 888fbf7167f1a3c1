"""A multi-step task's per-step files on the run page: the attempt lists each step's agent log,
verifier output and artifact (steps/<name>/…), and each is a working download link, a step name with a
'%' included (the downloads route replaces it, and the page follows)."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.e2e.web_ui_support import ACK_WAIT, add_folder_benchmark, sign_in
from tests.support.tasks import STEPS, two_step_task

ORACLE_RUN = (
    '[experiment]\nbenchmark = "{benchmark}"\n[[agents]]\nharness = "oracle"\n'
    '[agents.model]\ntype = "hosted"\nbase_model = "none"\n'
)


def test_each_steps_files_are_listed_and_linked_on_the_run_page(
    shared_stack, api_for, page: Page, tmp_path: Path
) -> None:
    stack = shared_stack(executors=1, **ACK_WAIT)
    api = api_for(stack)
    two_step_task(tmp_path / "steps")
    add_folder_benchmark(api, tmp_path / "steps", "steps")
    assert api.benchmark_ready("steps")["sync_status"] == "ready"
    run = api.submit_toml(ORACLE_RUN.format(benchmark="steps"))
    assert api.wait_run(run["id"])["benchmark_run"]["status"] == "finished"
    sign_in(page, stack)

    page.goto(f"{stack.url}/benchmarks/runs/{run['id']}?tab=results")
    results = page.get_by_test_id("results-table")
    results.get_by_role("button", name=re.compile(r"Details of two-steps")).click()
    listed = results.get_by_test_id("artifacts")
    for step in STEPS:
        for path, content in {
            f"steps/{step}/agent/note.txt": f"agent of {step}\n",
            f"steps/{step}/verifier/seen.txt": f"verified {step}\n",
            f"steps/{step}/artifacts/app/{step}.txt": f"made by {step}\n",
        }.items():
            link = listed.get_by_role("link", name=path, exact=True)
            expect(link).to_have_attribute("href", re.compile(r"^/api/downloads/runs/"))
            fetched = page.request.get(f"{stack.url}{link.get_attribute('href')}")
            assert (fetched.status, fetched.text()) == (200, content), path
