"""What the gateway serves as scores is what the scoring code computed, checked against the spec itself.

The attempts are seeded; scores, intervals, ranks and the leaderboard come from regatta_scoring (conftest's
`progress`). The expected numbers are docs/reference/statistics.md §8's published vectors, compared exactly:
an interval off by one ulp, anywhere between the scorer and the response, fails here.
"""

from __future__ import annotations

import csv
import io
from typing import Any

from .conftest import Gateway, demo_config
from .test_cli_downloads import fetch, urls_for

TASKS = [f"t{i}" for i in range(5)]
# Vector 3 (statistics.md §8): Wilson intervals of one 0/1 outcome per task, N = 5.
WILSON_3_OF_5 = (0.2307242812760128, 0.882379225767352)
WILSON_5_OF_5 = (0.5655175352168251, 1.0)


def three_of_five_and_five_of_five(agent: int, task: str) -> bool:
    return agent == 1 or task in ("t0", "t1", "t2")


def interval(metric: dict[str, Any]) -> tuple[float, float]:
    return metric["ci_low"], metric["ci_high"]


def test_run_scores_intervals_and_ranks_are_the_specs_on_every_read(gateway: Gateway) -> None:
    gw = gateway
    benchmark_id = gw.benchmark("five", TASKS)
    run = gw.submit(demo_config("five"))
    gw.progress(run["id"], passes=three_of_five_and_five_of_five)

    detail = gw.ok(gw.v1("GET", f"/runs/{run['id']}"))
    metrics = {m["agent_index"]: m for m in detail["agent_metrics"]}
    assert metrics[0]["pass_at_1"]["value"] == 0.6 and metrics[1]["pass_at_1"]["value"] == 1.0
    assert interval(metrics[0]["pass_at_1"]) == WILSON_3_OF_5
    assert interval(metrics[1]["pass_at_1"]) == WILSON_5_OF_5
    assert metrics[0]["pass_at_1"]["n"] == 5
    # Two discordant tasks: the paired test gives p = 0.5, so the two cannot be separated and share rank 1.
    assert [(metrics[i]["rank"], metrics[i]["tied"]) for i in (0, 1)] == [(1, True), (1, True)]

    cli = gw.ok(gw.cli("GET", f"/benchmark-runs/{run['id']}"))
    assert [interval(m["pass_at_1"]) for m in cli["agent_metrics"]] == [WILSON_3_OF_5, WILSON_5_OF_5]

    board = gw.ok(gw.v1("GET", f"/benchmarks/{benchmark_id}/leaderboard"))["leaderboard"]
    by_harness = {row["harness"]: row for row in board}
    assert interval(by_harness["oracle"]["pass_at_1"]) == WILSON_3_OF_5
    assert interval(by_harness["nop"]["pass_at_1"]) == WILSON_5_OF_5
    assert [(row["harness"], row["rank"], row["tied"]) for row in board] == [
        ("nop", 1, True),
        ("oracle", 1, True),
    ]
    comparison = by_harness["oracle"]["comparison"]
    assert comparison["p_value"] == 0.5 and comparison["difference"] == -0.4

    manifest = gw.ok(gw.cli("GET", f"/benchmark-runs/{run['id']}/outputs/manifest?types=summary"))
    url = urls_for(gw, run["id"], manifest["files"])["summary.csv"]
    summary = list(csv.DictReader(io.StringIO(fetch(gw, url).text)))
    assert [float(row["pass_at_1_ci_low"]) for row in summary] == [WILSON_3_OF_5[0], WILSON_5_OF_5[0]]
