"""Issue 28, item 1a: a `provider` model that litellm's bundled model map does not list is accepted
with a warning naming the model and the harness (its attempts would fail a minute later); a listed
one, or a harness that does not call models through litellm, gets none. The warning is the answer's
only difference: the recorded submission is the same. The warning is `submit_run`'s answer, tested on
the service layer; that a TOML body submitted over HTTP carries it stays on HTTP (a request's decoding)."""

from __future__ import annotations

from typing import Any

from regatta_shared.eventstore import EventStore

from .conftest import Gateway, demo_config
from .service_support import Services


def provider_agent(model: str, harness: str = "terminus-2") -> dict[str, Any]:
    return {
        "harness": harness,
        "model": {"type": "provider", "model": model, "api_key_secret": "PROVIDER_KEY"},
        "env": {},
    }


def config(*agents: dict[str, Any]) -> dict[str, Any]:
    return demo_config(agents=list(agents))


def stored_key(gw: Gateway) -> None:
    body = {"name": "PROVIDER_KEY", "value": "sk-test", "scope": "workspace"}
    gw.ok(gw.v1("POST", "/secrets", json=body, workspace="default"), 201)


def submitted(store: EventStore, run_id: str) -> dict[str, Any]:
    (event,) = [e for e in store.read_stream(f"run-{run_id}") if e.type == "RunSubmitted"]
    data = dict(event.data)
    for varying in ("run_id", "name", "config_toml", "sealed_secrets"):  # per-run key
        data.pop(varying, None)
    return data


def test_an_unknown_provider_model_is_accepted_with_a_warning_naming_it(services: Services) -> None:
    sv = services
    sv.benchmark("demo", ["t1"])
    sv.set_secret("PROVIDER_KEY", "sk-test", "workspace")
    unknown = sv.submit(config(provider_agent("openai/gpt-9-turbo-nonexistent")))
    known = sv.submit(config(provider_agent("openai/gpt-4o-mini")))
    other_harness = sv.submit(config(provider_agent("openai/gpt-9-turbo-nonexistent", "codex")))

    (warning,) = unknown["warnings"]
    assert "'openai/gpt-9-turbo-nonexistent'" in warning and "'terminus-2'" in warning, warning
    assert known["warnings"] == []
    assert other_harness["warnings"] == [], "codex does not call models through litellm"
    assert unknown["status"] == known["status"] == "pending"
    # The run is recorded as any other: the events differ only by the model's name.
    recorded_unknown, recorded_known = submitted(sv.store, unknown["id"]), submitted(sv.store, known["id"])
    assert recorded_unknown["agents"][0]["model"]["model"] == "openai/gpt-9-turbo-nonexistent"
    recorded_unknown["agents"][0]["model"]["model"] = "openai/gpt-4o-mini"
    assert recorded_unknown == recorded_known
    assert "warning" not in sv.all_event_json().lower()


def test_the_v1_toml_submission_carries_the_warning(gateway: Gateway) -> None:
    gw = gateway
    gw.benchmark("demo", ["t1"])
    stored_key(gw)
    toml = (
        '[experiment]\nbenchmark = "demo"\n[[agents]]\nharness = "terminus-2"\n'
        '[agents.model]\ntype = "provider"\nmodel = "anthropic/claude-nonexistent-9"\n'
        'api_key_secret = "PROVIDER_KEY"\n'
    )
    response = gw.v1(
        "POST",
        "/runs",
        content=toml.encode(),
        headers={"Content-Type": "application/toml"},
        workspace="default",
    )
    created = gw.ok(response, 201)
    (warning,) = created["warnings"]
    assert "anthropic/claude-nonexistent-9" in warning
