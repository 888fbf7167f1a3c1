"""One identity per agent (issue 38): a harness that calls no model is one participant however its run
named a model; a harness with a model keeps it, LoRA and all."""

from __future__ import annotations

from regatta_shared.events import AgentSpec, ModelSpec
from regatta_shared.rules.participants import agent_label, canonical_key, rank_text, stored_agent_model

# "None" in the New Run form, the bundled demo's hosted none/none, and a model nobody calls.
NO_MODEL_SPELLINGS = [
    ModelSpec(type="hosted", base_model="none", lora_model_name=""),
    ModelSpec(type="hosted", base_model="none", lora_model_name="none"),
    ModelSpec(type="provider", model="openai/gpt-4o"),
]


def test_a_harness_that_calls_no_model_is_one_participant_however_its_model_was_named() -> None:
    for harness in ("oracle", "nop"):
        agents = [AgentSpec(index=0, harness=harness, model=model) for model in NO_MODEL_SPELLINGS]
        assert {a.participant for a in agents} == {f"{harness}|"}
        assert {a.participant_model for a in agents} == {""}
        assert {agent_label(a.harness, a.model.display_name) for a in agents} == {harness}
        stored = {stored_agent_model(a.model_dump()) for a in agents}
        assert stored == {""}, "a stored spec folds to the same identity"


def test_a_harness_with_a_model_keeps_its_model() -> None:
    lora = AgentSpec(
        index=0,
        harness="terminus-2",
        model=ModelSpec(type="hosted", base_model="qwen3-8b", lora_model_name="sft-1"),
    )
    provider = AgentSpec(index=1, harness="codex", model=ModelSpec(type="provider", model="openai/gpt-5"))
    assert lora.participant == "terminus-2|qwen3-8b:sft-1"
    assert provider.participant == "codex|openai/gpt-5"
    assert agent_label("codex", "openai/gpt-5") == "codex · openai/gpt-5"
    assert stored_agent_model(lora.model_dump()) == "qwen3-8b:sft-1"
    # Two models of one harness stay two participants.
    assert lora.participant != AgentSpec(index=2, harness="terminus-2", model=provider.model).participant


def test_keys_stored_before_the_rule_read_as_now() -> None:
    assert canonical_key("oracle|none:none") == canonical_key("oracle|none") == "oracle|"
    assert canonical_key("codex|openai/gpt-5") == "codex|openai/gpt-5"


def test_a_shared_rank_reads_with_an_equals_sign() -> None:
    assert rank_text(1, True) == "1="
    assert rank_text(3, False) == "3"
    assert rank_text(None, False) == "–"
