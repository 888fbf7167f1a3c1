"""Hosted models (issue 19, item 3): the operator's declaration checked field by field, a run's hosted
model admitted only when declared, and the executor's trial wired to the declared endpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from regatta_executor.attempt.trials import trial_config
from regatta_executor.environments.choice import EnvironmentChoice
from regatta_gateway.admission.hosted_models import admit_hosted
from regatta_shared.events import AgentSpec, ModelSpec
from regatta_shared.messaging.jobs import AttemptJob
from regatta_shared.rules.hosted_models import HostedModel, HostedModelsError, key_name, parse

DECLARED = [
    {"name": "Qwen/Qwen3-8B", "base_url": "http://vllm.internal:8000/v1/", "api_key_env": "VLLM_KEY",
     "lora_adapters": ["my-lora"]},
    {"name": "llama-3.1-8b", "base_url": "https://sglang.example.com/v1"},
]  # fmt: skip
ENV = {"VLLM_KEY": "sk-vllm-operator-key"}


def test_a_declaration_parses_into_models_and_users_see_only_names() -> None:
    qwen, llama = parse(json.dumps(DECLARED), ENV)
    assert qwen == HostedModel("Qwen/Qwen3-8B", "http://vllm.internal:8000/v1", "VLLM_KEY", ("my-lora",))
    assert llama.api_key_env is None and llama.lora_adapters == ()
    assert qwen.public() == {"name": "Qwen/Qwen3-8B", "lora_adapters": ["my-lora"]}
    assert parse(None) == () and parse("  ") == ()


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ("{not json", "REGATTA_HOSTED_MODELS: not JSON"),
        ('{"name": "m"}', "REGATTA_HOSTED_MODELS: must be a JSON list"),
        ('["m"]', "REGATTA_HOSTED_MODELS[0]: must be an object"),
        ('[{"base_url": "http://h/v1"}]', "REGATTA_HOSTED_MODELS[0].name: required"),
        ('[{"name": "-x", "base_url": "http://h/v1"}]', "REGATTA_HOSTED_MODELS[0].name: must be"),
        ('[{"name": "m"}]', "REGATTA_HOSTED_MODELS[0].base_url: required"),
        ('[{"name": "m", "base_url": "ftp://h/v1"}]', "REGATTA_HOSTED_MODELS[0].base_url: must be an http"),
        ('[{"name": "m", "base_url": "http://u:p@h/v1"}]',
         "REGATTA_HOSTED_MODELS[0].base_url: must not hold"),
        ('[{"name": "m", "base_url": "http://h:port/v1"}]', "REGATTA_HOSTED_MODELS[0].base_url: not a valid"),
        ('[{"name": "m", "base_url": "http://h/v1 x"}]', "REGATTA_HOSTED_MODELS[0].base_url: must be a URL"),
        ('[{"name": "m", "base_url": "http://h/v1", "api_key_env": "NOT_SET_HERE"}]',
         "REGATTA_HOSTED_MODELS[0].api_key_env: the environment variable NOT_SET_HERE is not set"),
        ('[{"name": "m", "base_url": "http://h/v1", "api_key_env": "lower"}]',
         "REGATTA_HOSTED_MODELS[0].api_key_env: must be an environment variable name"),
        ('[{"name": "m", "base_url": "http://h/v1", "lora_adapters": "a"}]',
         "REGATTA_HOSTED_MODELS[0].lora_adapters: must be a list"),
        ('[{"name": "m", "base_url": "http://h/v1", "lora_adapters": ["a", "$(x)"]}]',
         "REGATTA_HOSTED_MODELS[0].lora_adapters[1]: must be"),
        ('[{"name": "m", "base_url": "http://h/v1", "key": "sk-1"}]',
         "REGATTA_HOSTED_MODELS[0].key: unknown field"),
        ('[{"name": "m", "base_url": "http://h/v1"}, {"name": "m", "base_url": "http://g/v1"}]',
         "REGATTA_HOSTED_MODELS[1].name: 'm' is declared twice"),
    ],
)  # fmt: skip
def test_a_bad_declaration_is_refused_naming_its_field(raw: str, named: str) -> None:
    with pytest.raises(HostedModelsError) as refused:
        parse(raw, {})
    assert str(refused.value).startswith(named), str(refused.value)
    assert "sk-1" not in str(refused.value), "a misplaced key is never echoed"


def hosted(base: str, lora: str = "") -> ModelSpec:
    return ModelSpec(type="hosted", base_model=base, lora_model_name=lora)


def test_only_declared_hosted_models_are_admitted_and_their_endpoint_and_key_resolved(monkeypatch) -> None:
    monkeypatch.setenv("VLLM_KEY", ENV["VLLM_KEY"])
    declared = parse(json.dumps(DECLARED))
    model, keys, issues = admit_hosted(2, "terminus-2", hosted("Qwen/Qwen3-8B", "my-lora"), declared)
    assert issues == [] and model.base_url == "http://vllm.internal:8000/v1"
    assert keys == {key_name(2): ENV["VLLM_KEY"]}
    model, keys, issues = admit_hosted(0, "terminus-2", hosted("llama-3.1-8b"), declared)
    assert (model.base_url, keys, issues) == ("https://sglang.example.com/v1", {}, [])

    _, _, issues = admit_hosted(0, "terminus-2", hosted("Qwen/Qwen3-8B"), ())
    assert issues[0]["key"] == "agents.0.model"
    assert "hosted models are not available: this deployment declares none" in issues[0]["message"]
    _, _, issues = admit_hosted(1, "codex", hosted("gpt-9"), declared)
    assert issues == [
        {"key": "agents.1.model.base_model",
         "message": "unknown hosted model 'gpt-9'; declared: Qwen/Qwen3-8B, llama-3.1-8b"}
    ]  # fmt: skip
    _, _, issues = admit_hosted(0, "terminus-2", hosted("llama-3.1-8b", "my-lora"), declared)
    assert issues[0]["key"] == "agents.0.model.lora_model_name" and "declared: none" in issues[0]["message"]
    # A harness that calls no model takes any hosted entry as a label, declared or not.
    model, keys, issues = admit_hosted(0, "oracle", hosted("alpha"), ())
    assert (model, keys, issues) == (hosted("alpha"), {}, [])


def job_for(model: ModelSpec, index: int = 1) -> AttemptJob:
    return AttemptJob(
        run_id="r",
        attempt_id="a",
        agent=AgentSpec(index=index, harness="terminus-2", model=model),
        task="t",
        task_digest="sha256:x",
        attempt_index=0,
    )


def test_the_trial_calls_the_declared_endpoint_with_the_sealed_key_under_the_served_name() -> None:
    model = hosted("Qwen/Qwen3-8B", "my-lora").model_copy(update={"base_url": "http://vllm:8000/v1"})
    secrets = {key_name(1): "sk-operator", "OTHER": "x"}
    agent = trial_config(job_for(model), Path("/t"), Path("/w"), EnvironmentChoice("local", {}), secrets)[
        "agent"
    ]
    assert agent["model_name"] == "openai/my-lora", "vLLM serves an adapter under its own name"
    assert agent["base_url"] == "http://vllm:8000/v1"
    assert agent["env"]["OPENAI_API_KEY"] == "sk-operator"
    assert not [name for name in agent["env"] if name.startswith("_REGATTA")], "the sealed name stays hidden"

    keyless = hosted("llama").model_copy(update={"base_url": "http://sglang/v1"})
    agent = trial_config(job_for(keyless), Path("/t"), Path("/w"), EnvironmentChoice("local", {}), {})[
        "agent"
    ]
    assert (agent["model_name"], agent["env"]["OPENAI_API_KEY"]) == ("openai/llama", "EMPTY")
