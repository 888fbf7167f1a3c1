"""One agent, one participant (issue 38): an oracle whose model was chosen as "None" in the New Run form
and one whose run names the bundled demo's hosted none/none are the same agent. Through the real gateway
and the real scoring code: one leaderboard row, and one name on every page, download and API body."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from regatta_shared.events import LeaderboardComputed
from regatta_shared.events.envelope import new_event
from regatta_shared.ids import leaderboard_stream

from .conftest import ADMIN_TOKEN, Gateway, demo_config
from .test_cli_downloads import fetch, urls_for

TASKS = [f"t{i}" for i in range(6)]
FORM_NONE = {"type": "hosted", "base_model": "none", "lora_model_name": ""}  # new_run.js, model "None"
DEMO_NONE = {"type": "hosted", "base_model": "none", "lora_model_name": "none"}  # examples/runs/demo.toml


def run_of(gw: Gateway, *agents: tuple[str, dict[str, Any]]) -> str:
    body = demo_config(
        "solo",
        agents=[{"harness": harness, "model": model, "env": {}} for harness, model in agents],
        execution_config={"attempts_per_task": 1},
    )
    run_id = gw.submit(body)["id"]
    gw.progress(run_id)  # agent 0 passes every task, the others fail every one
    return run_id


def board(gw: Gateway, benchmark_id: str) -> list[dict[str, Any]]:
    return gw.ok(gw.v1("GET", f"/benchmarks/{benchmark_id}/leaderboard"))["leaderboard"]


def page(gw: Gateway, path: str) -> str:
    response = gw.client.get(path, cookies={"regatta_token": ADMIN_TOKEN})
    assert response.status_code == 200, response.text
    return response.text


def summary_models(gw: Gateway, run_id: str) -> list[str]:
    manifest = gw.ok(gw.cli("GET", f"/benchmark-runs/{run_id}/outputs/manifest?types=summary"))
    url = urls_for(gw, run_id, manifest["files"])["summary.csv"]
    return [row["model"] for row in csv.DictReader(io.StringIO(fetch(gw, url).text))]


def test_an_oracle_with_model_none_and_one_with_hosted_none_none_are_one_row(
    gateway: Gateway,
) -> None:
    gw = gateway
    benchmark_id = gw.benchmark("solo", TASKS)
    form_run = run_of(gw, ("oracle", FORM_NONE))
    demo_run = run_of(gw, ("oracle", DEMO_NONE), ("nop", DEMO_NONE))

    rows = board(gw, benchmark_id)
    # Both oracle runs qualified; they are one participant, so its latest run is its one row.
    assert [(r["participant"], r["label"], r["model"], r["run_id"]) for r in rows] == [
        ("oracle|", "oracle", "", demo_run),
        ("nop|", "nop", "", demo_run),
    ]
    assert (rows[0]["rank"], rows[0]["tied"]) == (1, False)
    assert rows[1]["comparison"]["top"] == "oracle|"  # 6 discordant tasks: p = 1/32, separated

    # The benchmark page: one oracle row, named as the tooltip names the top, and no other name anywhere.
    html = page(gw, f"/benchmarks/{benchmark_id}")
    assert html.count('data-participant="oracle|"') == 1
    assert "<strong>oracle</strong>" in html and "(oracle)" in html
    assert "oracle · " not in html and "nop · " not in html
    assert 'data-testid="not-ranked-agent"' not in html, "the form's oracle is the ranked one, not apart"

    # Run pages, the run API, the downloads and the compare page and API: the same name.
    for run_id in (form_run, demo_run):
        detail = gw.ok(gw.v1("GET", f"/runs/{run_id}"))
        oracle = detail["agents"][0]
        assert (oracle["model"], oracle["label"]) == ("", "oracle")
        assert summary_models(gw, run_id)[0] == ""
        assert "oracle · " not in page(gw, f"/benchmarks/runs/{run_id}")
    compared = gw.ok(gw.v1("GET", "/compare", params={"a": f"{form_run}:0", "b": f"{demo_run}:0"}))
    assert [(compared[s]["label"], compared[s]["model"]) for s in "ab"] == [("oracle", ""), ("oracle", "")]
    html = page(gw, f"/compare?a={form_run}:0&b={demo_run}:0")
    assert "A: <strong>oracle</strong>" in html and "B: <strong>oracle</strong>" in html


def test_a_leaderboard_stored_before_the_rule_reads_with_the_identity_of_now(gateway: Gateway) -> None:
    """A LeaderboardComputed recorded by scoring before this rule names the oracle `none:none`: read now,
    it is the participant `oracle|` named `oracle`, as are the comparisons with it."""
    gw = gateway
    benchmark_id = gw.benchmark("solo", TASKS)
    run_of(gw, ("oracle", DEMO_NONE), ("nop", DEMO_NONE))
    stream = leaderboard_stream(benchmark_id)
    current = gw.store.read_stream(stream)[-1].data["rows"]
    old = json.loads(
        json.dumps(current)
        .replace('"oracle|', '"oracle|none:none')
        .replace('"nop|', '"nop|none:none')
        .replace('"model": ""', '"model": "none:none"')
    )
    assert old != current
    gw.store.append(stream, [new_event(LeaderboardComputed(benchmark_id=benchmark_id, rows=old))])
    gw.settle()

    rows = board(gw, benchmark_id)
    assert [(r["participant"], r["label"], r["model"]) for r in rows] == [
        ("oracle|", "oracle", ""),
        ("nop|", "nop", ""),
    ]
    assert rows[1]["comparison"]["top"] == "oracle|"
    html = page(gw, f"/benchmarks/{benchmark_id}")
    assert "none:none" not in html and "(oracle)" in html
