"""Issue 16, findings 4 and 5: values that would poison the log or the services downstream are refused
at the gateway with a 4xx naming the field, and change nothing (no event is stored).

Finding 4: a benchmark `name` of 3,000,000 characters or of the wrong type, and any request whose event
would be larger than NATS delivers (the server's max_payload, from its INFO). Finding 5: NaN and
Infinity in JSON and TOML bodies (`"timeout_multiplier": Infinity` was stored as null and poisoned the
scheduler and scoring).
"""

from __future__ import annotations

import json

import pytest

from .conftest import Gateway, demo_config
from .test_hostile_input import Unchanged, refused

FOLDER = {"source_type": "folder", "path": "/srv/benchmarks/poison"}


@pytest.mark.parametrize(
    "name",
    ["x" * 3_000_000, {"$gt": ""}, ["a"], 12, "line\nbreak"],
    ids=["three-million-characters", "object", "list", "number", "control-character"],
)
def test_a_benchmark_name_that_is_huge_or_not_a_string_is_refused(gateway: Gateway, name: object) -> None:
    with Unchanged(gateway):
        body = refused(gateway.v1("POST", "/benchmarks", json={**FOLDER, "name": name}), 400, "name")
    assert "name must" in body["message"]


def test_an_event_larger_than_the_bus_delivers_is_refused_naming_the_field(gateway: Gateway) -> None:
    """2 MB of description fits the body limit (4 MiB) but not NATS's max_payload (1 MiB): 413."""
    limit = gateway.store.max_event_bytes
    assert limit is not None and limit < 2_000_000
    metadata = {"description": "d" * 2_000_000}
    with Unchanged(gateway):
        body = refused(
            gateway.v1("POST", "/benchmarks", json={**FOLDER, "name": "big", "metadata": metadata}),
            413,
            "source.metadata.description",
        )
    assert body["code"] == "PAYLOAD_TOO_LARGE" and body["max_bytes"] == limit
    # Just under the limit is stored as before.
    metadata = {"description": "d" * (limit - 4096)}
    gateway.ok(gateway.v1("POST", "/benchmarks", json={**FOLDER, "name": "fits", "metadata": metadata}), 201)


NON_FINITE_JSON = [
    ('"timeout_multiplier": Infinity', "execution_config.timeout_multiplier"),
    ('"timeout_multiplier": -Infinity', "execution_config.timeout_multiplier"),
    ('"cost_cap_usd": NaN', "execution_config.cost_cap_usd"),
    ('"pass_threshold": NaN', "execution_config.pass_threshold"),
]


@pytest.mark.parametrize(("member", "field"), NON_FINITE_JSON, ids=[f for _, f in NON_FINITE_JSON])
def test_non_finite_numbers_in_a_json_submission_are_refused(
    gateway: Gateway, member: str, field: str
) -> None:
    gateway.benchmark("demo", ["t1"])
    agents = demo_config()["agents"]
    raw = (
        '{"experiment_config": {"benchmark": "demo"}, "agents": '
        + json.dumps(agents)
        + ', "execution_config": {'
        + member
        + "}}"
    )
    json_body = {"Content-Type": "application/json"}
    with Unchanged(gateway):
        for response in (
            gateway.v1("POST", "/runs", content=raw.encode(), headers=json_body),
            gateway.cli("POST", "/benchmark-runs", content=raw.encode(), headers=json_body),
        ):
            body = refused(response, 400, field)
            assert "finite" in body["message"]


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "+inf"])
def test_non_finite_numbers_in_a_toml_submission_are_refused(gateway: Gateway, value: str) -> None:
    gateway.benchmark("demo", ["t1"])
    toml = (
        '[experiment]\nbenchmark = "demo"\n[[agents]]\nharness = "oracle"\n'
        '[agents.model]\ntype = "hosted"\nbase_model = "none"\n'
        f"[execution]\ntimeout_multiplier = {value}\n"
    )
    with Unchanged(gateway):
        response = gateway.v1(
            "POST", "/runs", content=toml.encode(), headers={"Content-Type": "application/toml"}
        )
        body = refused(response, 400, "execution.timeout_multiplier")
    assert "finite" in body["message"]


def test_non_finite_numbers_anywhere_in_a_json_body_are_refused(gateway: Gateway) -> None:
    """Not only run configs: every JSON body the API reads (here the workspace budget)."""
    with Unchanged(gateway):
        response = gateway.v1(
            "PUT",
            "/workspace/budget",
            content=b'{"budget_usd": Infinity}',
            headers={"Content-Type": "application/json"},
        )
        body = refused(response, 400, "budget_usd")
    assert "finite" in body["message"]


def _with_model(name: str) -> dict:
    config = demo_config()
    config["agents"][0]["model"] = {"type": "hosted", "base_model": name}
    return config


OVERSIZED_SUBMISSIONS = [
    (_with_model("m" * 3_000_000), "agents.0.model.hosted.base_model"),
    (demo_config(env_config={f"K{n}": "v" for n in range(500)}), "env_config"),
    (demo_config(tasks_config={"task_names": ["t1"] * 20_000}), "tasks_config.task_names"),
    (demo_config(execution_config={"timeout_multiplier": 1e300}), "execution_config.timeout_multiplier"),
]


@pytest.mark.parametrize(
    ("config", "field"), OVERSIZED_SUBMISSIONS, ids=[f for _, f in OVERSIZED_SUBMISSIONS]
)
def test_oversized_submission_values_are_refused_naming_the_field(
    gateway: Gateway, config: dict, field: str
) -> None:
    gateway.benchmark("demo", ["t1"])
    with Unchanged(gateway):
        refused(gateway.v1("POST", "/runs", json=config), 400, field)


@pytest.mark.parametrize("seconds", [10**30, 10**12, {"$gt": 0}, 1.5])
def test_a_token_lifetime_out_of_range_is_refused(gateway: Gateway, seconds: object) -> None:
    with Unchanged(gateway):
        refused(
            gateway.v1("POST", "/tokens", json={"name": "t", "expires_in_seconds": seconds}),
            400,
            "expires_in_seconds",
        )
