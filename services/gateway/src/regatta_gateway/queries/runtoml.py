"""A run's configuration as TOML (the Configuration tab, `configuration.toml` in the run's detail): exactly
a valid submission, so that posting it (`POST /api/v1/runs`, `regatta run submit`, "Run again") runs the
same benchmark, tasks, agents and execution settings again.

What the platform resolved rather than the user chose (the benchmark's id, the version and digest the run
is locked to, how many tasks the selection gave) is shown as TOML comments: the run-config schema rejects
unknown keys everywhere, as the Osmosis CLI does (osmosis-cli-contract.md §6), and a resubmission resolves
them afresh. Execution settings are written as resolved (the pass threshold; the integrity policy when
it is not the benchmark's standard one), so a resubmission keeps the run's scoring conditions.

Every value is written through `_value`, comments too: a name with a line break cannot end a comment.
"""

from __future__ import annotations

import re
from typing import Any

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
# Settings the submission schema takes in [execution]; verifier secrets go in [verifier] instead.
_EXECUTION = (
    "attempts_per_task",
    "max_concurrent_attempts",
    "timeout_multiplier",
    "max_retries",
    "pass_threshold",
    "judge_model",
    "judge_api_key_secret",
    "cost_cap_usd",
    "verifier_integrity",
)


def _string(text: str) -> str:
    """A TOML basic string: quotes, backslashes and every control character escaped."""
    out = []
    for c in text:
        if c in _ESCAPES:
            out.append(_ESCAPES[c])
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def _key(key: str) -> str:
    return key if _BARE_KEY.match(key) else _string(key)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return _string(str(value))


def _pairs(values: dict[str, Any], *, empty: bool = False) -> list[str]:
    """`key = value` lines; unset values (None, and unless `empty` "" and []) are left out."""
    kept = {k: v for k, v in values.items() if v is not None and (empty or v not in ("", []))}
    return [f"{_key(k)} = {_value(v)}" for k, v in kept.items()]


def _agent(agent: dict[str, Any]) -> list[str]:
    lines = ["[[agents]]", *_pairs({"harness": agent.get("harness")})]
    lines += _pairs({"harness_api_key_secret": agent.get("harness_api_key_secret")})
    model = dict(agent.get("model") or {})
    headers = model.pop("extra_headers", None) or {}
    lines += ["[agents.model]", *_pairs(model)]
    if headers:
        lines += ["[agents.model.extra_headers]", *_pairs(headers, empty=True)]
    if agent.get("env"):
        lines += ["[agents.env]", *_pairs(agent["env"], empty=True)]
    return lines


def _referenced(submission: dict[str, Any]) -> set[str]:
    """Secret names the TOML names already: agents' keys, the judge's key, the verifier's secrets."""
    execution = submission.get("execution") or {}
    names = {execution.get("judge_api_key_secret"), *(execution.get("verifier_secrets") or [])}
    for agent in submission.get("agents") or []:
        names |= {(agent.get("model") or {}).get("api_key_secret"), agent.get("harness_api_key_secret")}
    return {n for n in names if n}


def run_toml(submission: dict[str, Any]) -> str:
    """The TOML of a run's submission (RunSubmitted's data, as the read models keep it)."""
    lines = ["# Submit this file as is to run this configuration again (a new run)."]
    lines += ["[experiment]", *_pairs({"benchmark": submission.get("benchmark_name")})]
    derived = {
        "benchmark_id": submission.get("benchmark_id"),
        "resolved_version": submission.get("benchmark_version"),
        "resolved_digest": submission.get("benchmark_digest"),
    }
    lines += [f"# {line}" for line in _pairs(derived)]
    selection = {k: v for k, v in (submission.get("selection") or {}).items() if v}
    lines += ["", "[tasks]", *_pairs(selection)] if selection else ["", "# [tasks] left out: every task"]
    lines += [f"# {line}" for line in _pairs({"task_count": len(submission.get("tasks") or [])})]
    for agent in submission.get("agents") or []:
        lines += ["", *_agent(agent)]
    execution = dict(submission.get("execution") or {})
    standard = (submission.get("standard_conditions") or {}).get("verifier_integrity", "record")
    if execution.get("verifier_integrity") == standard:
        # The benchmark's own policy: left out, so the file is also one the Osmosis CLI takes (its schema
        # has no such key) and a resubmission gets the benchmark's standard policy as this run did.
        execution.pop("verifier_integrity")
    lines += ["", "[execution]", *_pairs({k: execution.get(k) for k in _EXECUTION})]
    if execution.get("verifier_secrets"):
        lines += ["", "[verifier]", *_pairs({"required": execution["verifier_secrets"]})]
    extra = [n for n in submission.get("secret_names") or [] if n not in _referenced(submission)]
    if extra:
        lines += ["", "[secrets]", *_pairs({"required": extra})]
    if submission.get("env"):
        lines += ["", "[env]", *_pairs(submission["env"], empty=True)]
    return "\n".join(lines) + "\n"
