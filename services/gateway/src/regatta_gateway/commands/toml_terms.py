"""Validation issues of a TOML submission in the file's own terms: `[execution] attempts_per_task` at the
line that sets it, not the JSON body's `execution_config.attempts_per_task` the file was mapped onto
(runconfig.toml_to_request). A user fixes the file they wrote; the body is an implementation detail."""

from __future__ import annotations

import re
from typing import Any

# JSON body field -> the TOML table it came from (runconfig.toml_to_request maps the other way).
_TABLES = {
    "experiment_config": "experiment",
    "tasks_config": "tasks",
    "execution_config": "execution",
    "env_config": "env",
    "secrets": "secrets",
}
# The tags of the model union (runconfig): pydantic puts the chosen one in an issue's location.
_MODEL_TYPES = {"provider", "endpoint", "hosted"}
_HEADER = re.compile(r"^\s*(\[\[?)\s*([A-Za-z0-9_.\-\"' ]+?)\s*\]\]?\s*(#.*)?$")
_LINE_AT = re.compile(r"at line (\d+)")


def _toml_place(key: str) -> tuple[str | None, int | None, str]:
    """(table, agent index, key within it) of a body field's dotted key."""
    parts = key.split(".")
    head, rest = parts[0], parts[1:]
    if head == "execution_config" and rest[:1] == ["verifier_secrets"]:
        return "verifier", None, "required"
    if head in _TABLES:
        return _TABLES[head], None, ".".join(rest)
    if head == "agents" and rest and rest[0].isdigit():
        index, inner = int(rest[0]), rest[1:]
        if inner[:1] == ["model"] and len(inner) > 1:
            inner = inner[2:] if inner[1] in _MODEL_TYPES else inner[1:]
            return "agents.model", index, ".".join(inner)
        return "agents", index, ".".join(inner)
    return None, None, key


def _line_of(text: str, table: str | None, agent: int | None, key: str) -> int | None:
    """The 1-based line that sets `key` in `table` (the agent-th [[agents]] block), else the table's
    header line, else None."""
    lines = text.splitlines()
    current: str | None = None
    agents_seen = -1
    header_line: int | None = None
    first = key.split(".")[0] if key else ""
    assignment = re.compile(rf"^\s*[\"']?{re.escape(first)}[\"']?\s*[.=]") if first else None
    for number, line in enumerate(lines, start=1):
        header = _HEADER.match(line)
        if header:
            current = header.group(2).replace('"', "").replace("'", "").replace(" ", "")
            if table is None and current == first:  # an unknown top-level table
                return number
            if current == "agents" and header.group(1) == "[[":
                agents_seen += 1
            if current == table and (agent is None or agents_seen == agent) and header_line is None:
                header_line = number
            continue
        in_table = current == table if table else current is None
        if in_table and (agent is None or agents_seen == agent) and assignment and assignment.match(line):
            return number
    return header_line


def _term(table: str | None, agent: int | None, key: str) -> str:
    if table is None:
        return key
    where = f"[[agents]] #{agent + 1}" if table == "agents" and agent is not None else f"[{table}]"
    if table == "agents.model" and agent is not None:
        where = f"[agents.model] of [[agents]] #{agent + 1}"
    return f"{where} {key}".rstrip() if key else where


def in_file_terms(issues: list[dict[str, str]], text: str) -> list[dict[str, Any]]:
    """`issues` (keys of the JSON body) renamed to the TOML file's tables and keys, with line numbers."""
    renamed: list[dict[str, Any]] = []
    for issue in issues:
        key = issue["key"]
        if key == "(toml)":
            found = _LINE_AT.search(issue["message"])
            renamed.append({**issue, "line": int(found.group(1))} if found else dict(issue))
            continue
        table, agent, inner = _toml_place(key)
        line = _line_of(text, table, agent, inner)
        renamed.append({**issue, "key": _term(table, agent, inner), **({"line": line} if line else {})})
    return renamed
