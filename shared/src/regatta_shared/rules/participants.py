"""Who an agent is, decided once: the identity scoring ranks (one leaderboard row per participant =
harness and model, product.md) and the name every page, download, API body and the CLI show for it.

A harness that calls no model (harnesses.NO_MODEL: oracle, nop) is one agent however its run named a model
("none" in the New Run form, a hosted none/none, anything else): its identity has no model. The identity is
derived from the stored spec whenever it is read, so runs recorded before this rule fold the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from regatta_shared.rules.harnesses import NO_MODEL

NO_VALUE = "–"
"""What the CLI shows for a missing number (no rank, no score)."""

TIED = "="
"""After a rank shared with another participant: `1=` (statistics.md §5, ties)."""


def spec_model_name(model: Mapping[str, Any] | None) -> str:
    """The model a stored ModelSpec names: `base:lora` for a hosted LoRA, the base model for another
    hosted one, else the model."""
    if not model:
        return ""
    if model.get("type") == "hosted" or (model.get("base_model") and not model.get("model")):
        base, lora = model.get("base_model") or "", model.get("lora_model_name") or ""
        return f"{base}:{lora}" if lora else base
    return str(model.get("model") or "")


def agent_model(harness: str | None, model: str | None) -> str:
    """The model part of an agent's identity: none for a harness that calls no model."""
    return "" if harness in NO_MODEL else (model or "")


def participant_key(harness: str, model: str | None) -> str:
    """A participant's key in scoring and the leaderboard: `harness|model`."""
    return f"{harness}|{agent_model(harness, model)}"


def canonical_key(key: str) -> str:
    """A stored participant key (of a leaderboard computed before this rule) as it is keyed now."""
    harness, _, model = key.partition("|")
    return participant_key(harness, model)


def agent_label(harness: str, model: str | None) -> str:
    """An agent's display name everywhere: `harness · model`, or the harness alone when it has no model."""
    model = agent_model(harness, model)
    return f"{harness} · {model}" if model else harness


def stored_agent_model(agent: Mapping[str, Any]) -> str:
    """The identity's model of a stored AgentSpec (a run submission's agent)."""
    return agent_model(agent.get("harness"), spec_model_name(agent.get("model")))


def rank_text(rank: int | None, tied: bool, missing: str = NO_VALUE) -> str:
    """`1`, `1=` when the rank is shared, or `missing` without a rank."""
    return missing if rank is None else f"{rank}{TIED if tied else ''}"
