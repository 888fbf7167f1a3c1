"""The web pages' `?fragment=` answers (issue 37): every region a page's script refreshes answers 200 with
its HTML, for runs in every state, and a fragment a page does not have answers 404 naming it; no page or
fragment of a valid run answers 5xx."""

from __future__ import annotations

import re

import httpx
from regatta_gateway.web import routes
from regatta_gateway.web.session import STATIC_DIR
from regatta_shared.ids import attempt_id

from .conftest import ADMIN_TOKEN, Gateway, demo_config

REGION = re.compile(r'data-region="([^"]+)"')
SCRIPT_REFRESH = re.compile(r"refreshRegions\(\[([^\]]*)\]")


def get(gw: Gateway, path: str, **params: str) -> httpx.Response:
    return gw.client.get(path, params=params, cookies={"regatta_token": ADMIN_TOKEN}, follow_redirects=False)


def regions_of(gw: Gateway, path: str) -> set[str]:
    """The regions the page as rendered marks for its script to refresh."""
    page = get(gw, path)
    assert page.status_code == 200, page.text
    return set(REGION.findall(page.text))


def fragments_answer(gw: Gateway, path: str, names: set[str]) -> None:
    """Each region alone and all at once: 200, exactly the names asked, each with its HTML."""
    assert names, path
    for asked in [[name] for name in sorted(names)] + [sorted(names)]:
        response = get(gw, path, fragment=",".join(asked))
        assert response.status_code == 200, (path, asked, response.text)
        body = response.json()
        assert sorted(body) == asked, (path, body)
        assert all(isinstance(html, str) and html.strip() for html in body.values()), (path, asked)


def seeded(gw: Gateway) -> tuple[str, dict[str, str]]:
    """A benchmark and one run in each state the run page shows: pending, running, finished."""
    benchmark_id = gw.benchmark("demo", ["t1", "t2"])
    runs = {}
    for state in ("pending", "running", "finished"):
        run_id = gw.submit(demo_config())["id"]
        if state != "pending":
            gw.progress(run_id, finish=state == "finished")
        runs[state] = run_id
    return benchmark_id, runs


def test_every_region_of_every_page_answers_and_no_page_fails(gateway: Gateway) -> None:
    gw = gateway
    benchmark_id, runs = seeded(gw)
    pages = {
        "/benchmarks": routes.BENCHMARKS_FRAGMENTS,
        f"/benchmarks/{benchmark_id}": routes.BENCHMARK_FRAGMENTS,
        **{f"/benchmarks/runs/{run_id}": routes.RUN_FRAGMENTS for run_id in runs.values()},
        "/settings/workspace": {"budget"},
        "/settings/members": {"members"},
        "/settings/tokens": {"tokens"},
        "/settings/webhooks": {"webhooks"},
    }
    served: set[str] = set()
    for path, declared in pages.items():
        regions = regions_of(gw, path)
        assert regions <= set(declared), (path, regions)  # a region the route cannot draw
        fragments_answer(gw, path, set(declared))
        served |= set(declared)

    new_run = f"/benchmarks/{benchmark_id}/runs/new"
    assert get(gw, new_run).status_code == 200
    secrets = get(gw, new_run, fragment="secrets")
    assert secrets.status_code == 200 and secrets.json() == {"secrets": []}
    served.add("secrets")

    # Every region a page script asks for is one some page serves.
    asked = {
        name.strip().strip("\"'")
        for script in STATIC_DIR.glob("*.js")
        for names in SCRIPT_REFRESH.findall(script.read_text())
        for name in names.split(",")
    }
    assert asked and asked <= served, asked - served

    # Every tab of every run, and an attempt's page, render whole.
    for run_id in runs.values():
        for tab in ("overview", "results", "configuration", "logs"):
            response = get(gw, f"/benchmarks/runs/{run_id}", tab=tab)
            assert response.status_code == 200, (run_id, tab, response.text)
    attempt = attempt_id(runs["finished"], 0, "t1", 0)
    assert get(gw, f"/benchmarks/runs/{runs['finished']}/attempts/{attempt}").status_code == 200


def test_a_fragment_a_page_does_not_have_is_not_found(gateway: Gateway) -> None:
    gw = gateway
    benchmark_id, runs = seeded(gw)
    run_page = f"/benchmarks/runs/{runs['finished']}"
    attempt = attempt_id(runs["finished"], 0, "t1", 0)
    for path, name in [
        (run_page, "results"),  # the Task Results tab is drawn by run.js, not by a fragment
        (run_page, "logs"),
        (run_page, "overview,nope"),
        (f"/benchmarks/{benchmark_id}", "rows"),
        ("/benchmarks", "header"),
        (f"/benchmarks/{benchmark_id}/runs/new", "header"),
        (f"{run_page}/attempts/{attempt}", "output"),  # a page without fragments
        ("/settings/members", "tokens"),
    ]:
        response = get(gw, path, fragment=name)
        assert response.status_code == 404, (path, name, response.text)
        body = response.json()
        assert body["field"] == "fragment" and "has no fragment" in body["message"], body
