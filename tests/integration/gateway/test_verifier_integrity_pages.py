"""Issue 36 over HTTP: the attempt's API detail and the pages that show integrity evidence (statuses,
shapes, and that an attacker's paths and names are shown as text). What is counted and filtered is
proven in the service layer (test_verifier_integrity.py)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html import unescape
from typing import Any

import pytest
from regatta_shared.events.integrity import (
    AgentProcess,
    AttemptIntegrity,
    Explanation,
    FileFacts,
    ToolChainChange,
)

from .conftest import ADMIN_TOKEN, Gateway, demo_config

# Every string here is what an agent could leave in its container for the platform to report.
HOSTILE = AttemptIntegrity(
    changes=[
        ToolChainChange(
            path="/usr/bin/<script>alert(1)</script>",
            change="added",
            after=FileFacts(kind="symlink", link="/tmp/\u202eexe.sh", uid=0, gid=0, mode=0o777),
        ),
        ToolChainChange(
            path="/usr/lib/python3/dist-packages/pytest/__init__.py",
            change="changed",
            before=FileFacts(kind="file", size=10, sha256="d" * 64, mode=0o644),
            after=FileFacts(kind="file", size=12, sha256="e" * 64, mode=0o644),
            explained_by=Explanation(source="pip", package="pytest"),
        ),
    ],
    changes_total=2,
    unexplained=1,
    processes=[AgentProcess(pid=7, name="<b>sh</b>", command="sh -c 'sleep 99'")],
    processes_total=1,
    verifier_files_written=["/logs/verifier/reward.txt"],
    note="<img src=x onerror=alert(1)>",
)
EVIDENCE = {"t1": HOSTILE, "t2": AttemptIntegrity(checked=False), "t3": None}


@pytest.fixture
def seeded(gateway: Gateway) -> Iterator[dict[str, Any]]:
    """A finished run of one agent whose three attempts have evidence, none checked, and none recorded."""
    gateway.benchmark("demo", ["t1", "t2", "t3"])
    config = demo_config()
    config["agents"] = config["agents"][:1]
    run_id = gateway.submit(config)["id"]
    gateway.progress(run_id, integrity=lambda _agent, task, _index: EVIDENCE[task])
    attempts = gateway.ok(gateway.v1("GET", f"/runs/{run_id}/attempts"))["attempts"]
    gateway.client.cookies.set("regatta_token", ADMIN_TOKEN)
    yield {"run": run_id, "attempts": {a["task"]: a["attempt_id"] for a in attempts}}
    gateway.client.cookies.clear()


def page(gateway: Gateway, path: str) -> str:
    response = gateway.client.get(path)
    assert response.status_code == 200, response.text
    return response.text


def text_of(html: str) -> str:
    """What a reader sees: tags dropped, entities decoded, white space collapsed."""
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def test_the_attempt_api_answers_the_attempt_with_its_evidence_and_labels(
    gateway: Gateway, seeded: dict[str, Any]
) -> None:
    run, aid = seeded["run"], seeded["attempts"]["t1"]
    body = gateway.ok(gateway.v1("GET", f"/runs/{run}/attempts/{aid}"))
    assert {"attempt_id", "task", "outcome", "result", "integrity", "labels", "run_id"} <= set(body)
    assert body["result"]["integrity"]["changes"][0]["path"] == "/usr/bin/<script>alert(1)</script>"
    assert body["integrity"] == {
        "checked": True,
        "unexplained": 1,
        "processes_alive": 1,
        "verifier_files_written": 1,
    }
    assert gateway.v1("GET", f"/runs/{run}/attempts/att_nope").status_code == 404
    refused = gateway.v1("GET", f"/runs/{run}/attempts", params={"integrity": "bogus"})
    assert (refused.status_code, refused.json()["field"]) == (400, "integrity")
    filtered = gateway.ok(gateway.v1("GET", f"/runs/{run}/attempts", params={"integrity": "not_checked"}))
    assert [a["task"] for a in filtered["attempts"]] == ["t2"]


def test_the_attempt_page_shows_the_evidence_as_text_with_the_label_actions_beside_it(
    gateway: Gateway, seeded: dict[str, Any]
) -> None:
    run, aid = seeded["run"], seeded["attempts"]["t1"]
    gateway.ok(
        gateway.v1("POST", f"/runs/{run}/attempts/{aid}/labels", json={"label": "reward hacking"}), 201
    )
    html = page(gateway, f"/benchmarks/runs/{run}/attempts/{aid}")
    # The attacker's markup is text: escaped, never a tag; the bidi override is spelled out.
    assert "<script>alert(1)" not in html and "<img src=x" not in html and "<b>sh</b>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "\u202e" not in html and "/tmp/\\u202eexe.sh" in html
    seen = text_of(html)
    for words in (
        "Policy Record (Harbor's semantics, evidence shown)",
        "1 unexplained change to the verifier's tools (of 2 changes)",
        "1 agent process alive when the verifier started",
        "1 verifier file written by another hand",
        "/usr/bin/<script>alert(1)</script> added unexplained",
        "Trust: a record in the container, which the agent can write",
        "7 <b>sh</b> sh -c 'sleep 99'",
        "/logs/verifier/reward.txt",
        "<img src=x onerror=alert(1)>",
        "Labels",
        "reward hacking",
        "Add label",
    ):
        assert words in seen, words
    assert html.index('data-testid="integrity"') < html.index('data-testid="attempt-labels"')
    assert 'data-remove-label="' in html  # the label's Remove action, as on the run page

    assert "Not checked:" in text_of(
        page(gateway, f"/benchmarks/runs/{run}/attempts/{seeded['attempts']['t2']}")
    )
    quiet = text_of(page(gateway, f"/benchmarks/runs/{run}/attempts/{seeded['attempts']['t3']}"))
    assert "Not recorded by this environment" in quiet and "Add label" in quiet


def test_agent_results_and_the_leaderboard_row_link_their_counts_to_the_attempts(
    gateway: Gateway, seeded: dict[str, Any]
) -> None:
    run = seeded["run"]
    link = f'href="/benchmarks/runs/{run}?tab=results&amp;agent=0&amp;integrity='
    overview = page(gateway, f"/benchmarks/runs/{run}")
    assert f"{link}unexplained" in overview and f"{link}verifier_writes" in overview
    assert f"{link}not_checked" in overview
    seen = text_of(overview)
    assert "1 attempt with unexplained changes to the verifier's tools" in seen
    assert "1 attempt with verifier files written by another hand" in seen
    assert "verifier integrity record" in seen  # the conditions it was scored under

    benchmark_id = gateway.ok(gateway.v1("GET", f"/runs/{run}"))["configuration"]["benchmark_id"]
    board = gateway.ok(gateway.v1("GET", f"/benchmarks/{benchmark_id}/leaderboard"))["leaderboard"]
    assert board[0]["integrity"]["unexplained"] == 1
    html = page(gateway, f"/benchmarks/{benchmark_id}")
    assert f"{link}unexplained" in html
    assert "1 attempt with unexplained changes to the verifier's tools" in text_of(html)
    assert "verifier integrity record" in text_of(html)

    form = page(gateway, f"/benchmarks/{benchmark_id}/runs/new")
    assert re.search(
        r'<option value="record" selected>Record \(Harbor&#39;s semantics, evidence shown\)', form
    )
    assert '<option value="enforce">Enforce (no agent process survives' in form
