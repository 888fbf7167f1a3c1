"""A run's `hosted` models admitted or refused at submission, against what the operator declared
(REGATTA_HOSTED_MODELS): an undeclared model is a 400 naming the field, never an error per attempt."""

from __future__ import annotations

from regatta_shared.events import ModelSpec
from regatta_shared.rules.harnesses import NO_MODEL
from regatta_shared.rules.hosted_models import HostedModel, key_name, key_value

NONE_DECLARED = (
    "hosted models are not available: this deployment declares none (REGATTA_HOSTED_MODELS); "
    "use a provider model or an OpenAI-compatible endpoint"
)


def admit_hosted(
    index: int, harness: str, model: ModelSpec, declared: tuple[HostedModel, ...]
) -> tuple[ModelSpec, dict[str, str], list[dict[str, str]]]:
    """The agent's model with its endpoint resolved, the key to seal for it (by its sealed name), and
    the issues that refuse it. Other model types, and harnesses that call no model (for which a hosted
    entry is only a label), pass unchanged."""
    if model.type != "hosted" or harness in NO_MODEL:
        return model, {}, []
    field = f"agents.{index}.model"
    if not declared:
        return model, {}, [{"key": field, "message": NONE_DECLARED}]
    found = next((m for m in declared if m.name == model.base_model), None)
    if found is None:
        names = ", ".join(m.name for m in declared)
        message = f"unknown hosted model {str(model.base_model)[:200]!r}; declared: {names}"
        return model, {}, [{"key": f"{field}.base_model", "message": message}]
    adapter = model.lora_model_name or ""
    if adapter and adapter not in found.lora_adapters:
        offered = ", ".join(found.lora_adapters) or "none"
        message = f"hosted model {found.name!r} has no LoRA adapter {adapter[:200]!r}; declared: {offered}"
        return model, {}, [{"key": f"{field}.lora_model_name", "message": message}]
    resolved = model.model_copy(update={"base_url": found.base_url})
    key = key_value(found)
    return resolved, ({key_name(index): key} if key else {}), []
