"""Behaviour kept across refactors: a recorded set of API requests over a seeded run answers exactly as it
did when the golden file was recorded (the gateway before it was arranged by job; issue 20).

What varies from one run of the test to the next (random ids, times, signatures, durations) is replaced
by stable placeholders before the comparison; everything else must match byte for byte. To record the file
anew after an intended change of behaviour: `REGATTA_RECORD_GOLDEN=1 pytest <this file>`, then review the
diff of `golden/api_responses.json` like code.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from tests.integration.gateway.conftest import Gateway, demo_config


@pytest.fixture
def gateway(gateway_on_both: Gateway) -> Gateway:
    """Both backends: the same seeded events must answer the same bytes on each."""
    return gateway_on_both


GOLDEN = Path(__file__).parent / "golden" / "api_responses.json"

_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})?")
_SIGNATURE = re.compile(r"([?&](?:sig|signature|expires|exp|token)=)[^&\"]+")
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
_HEX = re.compile(r"\b[0-9a-f]{16,}\b")
_VOLATILE_KEYS = {"duration_seconds", "mean_duration_seconds", "elapsed_seconds", "recorded_at"}


def _requests(run_ids: list[str], benchmark_id: str) -> list[tuple[str, str, str]]:
    """(api, method, path): every read a user or the Osmosis CLI makes of a benchmark and its runs."""
    first, second = run_ids
    v1 = [
        "/benchmarks",
        f"/benchmarks/{benchmark_id}",
        f"/benchmarks/{benchmark_id}/leaderboard",
        f"/benchmarks/{benchmark_id}/leaderboard?sort=cost_per_task",
        "/harnesses",
        "/runs",
        f"/runs?benchmark={benchmark_id}&status=finished",
        f"/runs/{first}",
        f"/runs/{second}",
        f"/runs/{first}/attempts",
        f"/runs/{first}/attempts?limit=2&offset=1",
        f"/runs/{first}/logs",
        f"/runs/{first}/downloads",
        "/runs/no-such-run",
        "/benchmarks/no-such-benchmark",
        "/workspaces",
        "/workspace/budget",
        "/secrets",
    ]
    cli = [
        "/verify",
        "/benchmarks",
        "/benchmarks/golden",
        "/benchmark-runs",
        f"/benchmark-runs/{first}",
        f"/benchmark-runs/{first}/logs",
        f"/benchmark-runs/{first}/outputs/manifest",
        "/benchmark-runs/no-such-run",
    ]
    return [("v1", "GET", p) for p in v1] + [("cli", "GET", p) for p in cli]


def _normalise(value: Any, names: dict[str, str]) -> Any:
    if isinstance(value, dict):
        return {
            k: ("<varies>" if k in _VOLATILE_KEYS and v is not None else _normalise(v, names))
            for k, v in sorted(value.items())
        }
    if isinstance(value, list):
        return [_normalise(v, names) for v in value]
    if isinstance(value, str):
        for real, placeholder in names.items():
            value = value.replace(real, placeholder)
        value = _SIGNATURE.sub(r"\1<sig>", value)
        value = _TIME.sub("<time>", value)
        return _HEX.sub("<hex>", _UUID.sub("<uuid>", value))
    return value


def _responses(gateway: Gateway) -> dict[str, Any]:
    tasks = ["t-alpha", "t-beta", "t-gamma"]
    benchmark_id = gateway.benchmark("golden", tasks, categories={"t-alpha": "easy"})
    run_ids = []
    for index in range(2):
        created = gateway.submit({**demo_config("golden"), "name": f"golden-{index}"})
        run_ids.append(created["id"])
        second = index == 1
        gateway.progress(
            created["id"], passes=lambda agent, task, s=second: agent == 0 or (s and task == "t-beta")
        )
    names = {benchmark_id: "<benchmark>", **{run: f"<run-{i}>" for i, run in enumerate(run_ids)}}
    for row in gateway.raw_rows("rm_attempts"):
        run = names[row["run_id"]].strip("<>")
        names[row["attempt_id"]] = f"<{run}-agent{row['agent_index']}-{row['task']}-{row['attempt_index']}>"
    for row in gateway.raw_rows("rm_tokens"):
        names.setdefault(row["id"], f"<token-{len(names)}>")
    for row in gateway.raw_rows("rm_users"):
        names.setdefault(row["id"], f"<user-{len(names)}>")
    for row in gateway.raw_rows("rm_workspaces"):
        names.setdefault(row["id"], f"<workspace-{len(names)}>")
    recorded: dict[str, Any] = {}
    for api, method, path in _requests(run_ids, benchmark_id):
        response = gateway.v1(method, path) if api == "v1" else gateway.cli(method, path)
        body = response.json() if response.content else None
        key = _normalise(f"{api} {method} {path}", names)
        recorded[key] = {"status": response.status_code, "body": _normalise(body, names)}
    return recorded


def test_recorded_requests_answer_as_they_did(gateway: Gateway) -> None:
    recorded = _responses(gateway)
    if os.environ.get("REGATTA_RECORD_GOLDEN") == "1":
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(recorded, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    golden = json.loads(GOLDEN.read_text())
    assert sorted(recorded) == sorted(golden), "the recorded set of requests changed"
    for key, expected in golden.items():
        if recorded[key] != expected:
            diff = difflib.unified_diff(
                json.dumps(expected, indent=1, sort_keys=True).splitlines(),
                json.dumps(recorded[key], indent=1, sort_keys=True).splitlines(),
                "golden",
                "now",
                lineterm="",
            )
            raise AssertionError(f"{key} answers differently from the golden file:\n" + "\n".join(diff))
