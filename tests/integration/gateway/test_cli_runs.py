"""`regatta run list` filters, and the confirmations of `run stop` and `benchmark remove` (issue 38): the
real CLI in a subprocess against the real gateway."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from .cli_support import regatta, served
from .conftest import Gateway, demo_config


@pytest.fixture
def url(gateway: Gateway) -> Iterator[str]:
    with served(gateway) as address:
        yield address


def listed(url: str, *filters: str) -> list[str]:
    result = regatta(url, "run", "list", *filters, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    return [r["id"] for r in json.loads(result.stdout)["benchmark_runs"]]


def test_run_list_filters_by_benchmark_status_and_limit(gateway: Gateway, url: str) -> None:
    gw = gateway
    gw.benchmark("demo", ["t1", "t2"])
    other_benchmark = gw.benchmark("other", ["t1"])
    finished = gw.submit(demo_config())["id"]
    gw.progress(finished)
    pending = gw.submit(demo_config())["id"]
    other = gw.submit(demo_config("other"))["id"]

    assert listed(url) == [other, pending, finished]  # newest first
    assert listed(url, "--benchmark", "demo") == [pending, finished]  # by name
    assert listed(url, "--benchmark", other_benchmark) == [other]  # by id
    assert listed(url, "--status", "finished") == [finished]
    assert listed(url, "--benchmark", "demo", "--status", "pending") == [pending]
    assert listed(url, "--limit", "2") == [other, pending]
    table = regatta(url, "run", "list", "--limit", "1")
    assert table.returncode == 0 and "1 of 3 runs shown" in table.stdout, table.stdout

    # Bad values name the option and the problem.
    for option, value, problem in (
        ("--status", "done", "must be one of pending, queued, running, finished, failed, stopped"),
        ("--limit", "0", "0 is not in the range 1<=x<=200"),
        ("--limit", "201", "201 is not in the range 1<=x<=200"),
    ):
        refused = regatta(url, "run", "list", option, value, "--json")
        assert refused.returncode == 2, refused.stdout + refused.stderr
        error = json.loads(refused.stderr)["error"]
        assert error["field"] == option and problem in error["message"], error
    unknown = regatta(url, "run", "list", "--benchmark", "no-such-benchmark", "--json")
    assert unknown.returncode == 1
    assert json.loads(unknown.stderr)["error"]["code"] == "NOT_FOUND", unknown.stderr
