"""The resolved run configuration as TOML (the Configuration tab), including the locked version."""

from __future__ import annotations

import json
from typing import Any

from regatta_shared.events import RunSubmitted


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return json.dumps(str(value))


def _table(name: str, values: dict[str, Any]) -> list[str]:
    lines = [f"[{name}]"]
    lines += [
        f"{key} = {_value(v)}" for key, v in values.items() if v is not None and not isinstance(v, dict)
    ]
    return lines


def resolved_toml(submitted: RunSubmitted, benchmark: dict[str, Any]) -> str:
    lines = _table(
        "experiment",
        {
            "benchmark": submitted.benchmark_name,
            "benchmark_id": submitted.benchmark_id,
            "source": f"{benchmark['source_type']}:{benchmark['source_ref']}",
            "resolved_version": submitted.benchmark_version,
            "resolved_digest": submitted.benchmark_digest,
        },
    )
    selection = submitted.selection.model_dump(exclude_defaults=True)
    lines += ["", *_table("tasks", {**selection, "task_count": len(submitted.tasks)})]
    for agent in submitted.agents:
        lines += ["", "[[agents]]", f"harness = {_value(agent.harness)}", "[agents.model]"]
        lines += [f"{k} = {_value(v)}" for k, v in agent.model.model_dump(exclude_defaults=True).items()]
        if agent.env:
            lines += ["[agents.env]", *(f"{k} = {_value(v)}" for k, v in agent.env.items())]
    lines += ["", *_table("execution", submitted.execution.model_dump(exclude={"verifier_secrets"}))]
    if submitted.execution.verifier_secrets:
        lines += ["", "[verifier]", f"required = {_value(submitted.execution.verifier_secrets)}"]
    if submitted.env:
        lines += ["", "[env]", *(f"{k} = {_value(v)}" for k, v in submitted.env.items())]
    return "\n".join(lines) + "\n"
