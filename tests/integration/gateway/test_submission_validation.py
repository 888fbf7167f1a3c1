"""Bad submissions (invariant 8): a clear error naming the field, and nothing stored."""

from __future__ import annotations

from typing import Any

import pytest
from regatta_gateway.errors import Invalid, NotFound, Refused
from regatta_gateway.queries.runs import list_runs

from .conftest import ADMIN_TOKEN, Gateway, demo_config
from .service_support import Services, refused
from .test_cli_contract import flat_error


def with_execution(**values: Any) -> dict[str, Any]:
    return demo_config(execution_config=values)


def unknown_harness() -> dict[str, Any]:
    config = demo_config()
    config["agents"][1]["harness"] = "no-such-harness"
    return config


JSON_CASES: list[tuple[str, dict[str, Any], type[Refused], str]] = [
    ("attempts 0", with_execution(attempts_per_task=0), Invalid, "execution_config.attempts_per_task"),
    ("attempts 101", with_execution(attempts_per_task=101), Invalid, "execution_config.attempts_per_task"),
    (
        "concurrency 0",
        with_execution(max_concurrent_attempts=0),
        Invalid,
        "execution_config.max_concurrent_attempts",
    ),
    ("timeout 0", with_execution(timeout_multiplier=0), Invalid, "execution_config.timeout_multiplier"),
    ("retries 11", with_execution(max_retries=11), Invalid, "execution_config.max_retries"),
    ("threshold 1.5", with_execution(pass_threshold=1.5), Invalid, "execution_config.pass_threshold"),
    (
        "attempts as text",
        with_execution(attempts_per_task="two"),
        Invalid,
        "execution_config.attempts_per_task",
    ),
    ("unknown top-level key", {**demo_config(), "extra": 1}, Invalid, "extra"),
    ("unknown execution key", with_execution(speed="fast"), Invalid, "execution_config.speed"),
    (
        "unknown agent key",
        {**demo_config(), "agents": [{"model": {"type": "hosted", "base_model": "b"}, "env": {}, "x": 1}]},
        Invalid,
        "agents.0.x",
    ),
    ("no agents", {**demo_config(), "agents": []}, Invalid, "agents"),
    ("unknown benchmark", demo_config("no-such-benchmark"), NotFound, "experiment_config.benchmark"),
    ("unknown harness", unknown_harness(), Invalid, "agents.1.harness"),
    ("syncing benchmark", demo_config("syncing"), Invalid, "experiment_config.benchmark"),
    ("unknown task", demo_config(tasks_config={"task_names": ["t9"]}), Invalid, "tasks.task_names"),
    (
        "missing secrets",
        demo_config(secrets={"required": ["NOPE"], "provided": {}}),
        NotFound,
        "secrets.required",
    ),
]


@pytest.mark.parametrize(("case", "config", "kind", "field"), JSON_CASES, ids=[c[0] for c in JSON_CASES])
def test_bad_json_submissions_name_the_field_and_store_nothing(
    pg_services: Services, case: str, config: dict[str, Any], kind: type[Refused], field: str
) -> None:
    sv = pg_services
    sv.benchmark("demo", ["t1", "t2"])
    sv.benchmark("syncing", ["t1"], ready=False)
    before = sv.event_count()
    error = refused(lambda: sv.submit(config), kind)
    assert error.field == field, error.message
    if error.issues:  # issue keys may use the TOML's table names (experiment.benchmark)
        assert error.issues[0]["key"].split(".")[-1] == field.split(".")[-1]
    assert sv.event_count() == before
    assert list_runs(sv.store, sv.scope(), 50, 0, None)["total_count"] == 0


# A TOML submission's errors are in the file's own terms (its tables and keys) with the line to fix.
TOML_CASES = [
    ("malformed", '[experiment\nbenchmark = "demo"\n', "(toml)", 1),
    ("unknown table", '[experiment]\nbenchmark = "demo"\n[bogus]\nx = 1\n', "bogus", 3),
    ("unknown key", '[experiment]\nbenchmark = "demo"\nflavour = "x"\n', "[experiment] flavour", 3),
    (
        "attempts 0",
        '[experiment]\nbenchmark = "demo"\n[[agents]]\nharness = "oracle"\n[agents.model]\ntype = "hosted"\n'
        'base_model = "b"\n[execution]\nattempts_per_task = 0\n',
        "[execution] attempts_per_task",
        9,
    ),
    (
        "second agent's model",
        '[experiment]\nbenchmark = "demo"\n[[agents]]\nharness = "oracle"\n[agents.model]\ntype = "hosted"\n'
        'base_model = "b"\n[[agents]]\nharness = "nop"\n[agents.model]\ntype = "hosted"\nbase_model = "b"\n'
        "colour = 1\n",
        "[agents.model] of [[agents]] #2 colour",
        13,
    ),
]


@pytest.mark.parametrize(("case", "toml", "field", "line"), TOML_CASES, ids=[c[0] for c in TOML_CASES])
def test_bad_toml_submissions_name_the_field_and_store_nothing(
    pg_gateway: Gateway, case: str, toml: str, field: str, line: int
) -> None:
    gw = pg_gateway
    gw.benchmark("demo", ["t1"])
    before = gw.event_count()
    response = gw.client.post(
        "/api/v1/runs",
        content=toml.encode(),
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/toml"},
    )
    body = flat_error(response, 400)
    assert body["field"] == field
    assert body["issues"][0]["line"] == line, body["issues"]
    assert gw.event_count() == before


def test_malformed_json_body_stores_nothing(pg_gateway: Gateway) -> None:
    gw = pg_gateway
    gw.benchmark("demo", ["t1"])
    before = gw.event_count()
    for raw in (b"{", b"[]", b'"text"'):
        flat_error(gw.cli("POST", "/benchmark-runs", content=raw), 400, "VALIDATION")
    assert gw.event_count() == before
