"""docs/benchmarks.md "Harbor conformance" has one row per field of Harbor's task.toml models.

The fields are read from Harbor's own pydantic models (TaskConfig and every model it nests), so an
upgrade of Harbor that adds a key fails here until the table says what Regatta does with it: a key
Harbor honours and Regatta silently ignores would otherwise go unnoticed. A row naming a field Harbor
no longer has fails too (the table would describe a key that does nothing).
"""

from __future__ import annotations

import re
import typing
from pathlib import Path
from typing import Any

from harbor.models.task.config import TaskConfig
from pydantic import BaseModel

DOC = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"
SECTION = "## Harbor conformance"
# The field of a row: the first backticked text of its first cell.
_FIELD = re.compile(r"`([^`]+)`")


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation can hold: itself, or inside Optional, Union, list, dict,
    Annotated (`list[str | ArtifactConfig] | None` holds ArtifactConfig)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if typing.get_origin(annotation) is typing.Literal:
        return []  # its arguments are values, not types
    found: list[type[BaseModel]] = []
    for argument in typing.get_args(annotation):
        found += _models_in(argument)
    return found


def harbor_fields(
    model: type[BaseModel] = TaskConfig, prefix: str = "", ancestors: tuple[type[BaseModel], ...] = ()
) -> set[str]:
    """Every field's dotted path as a task.toml author writes it (`verifier.environment.cpus`),
    nested models followed to the end."""
    # get_type_hints resolves Harbor's forward references (`list["MCPServerConfig"]`), which the
    # fields' own annotations keep as strings.
    hints = typing.get_type_hints(model)
    paths: set[str] = set()
    for name, info in model.model_fields.items():
        path = f"{prefix}{info.alias or name}"  # an alias is the key task.toml spells
        paths.add(path)
        for nested in dict.fromkeys(_models_in(hints[name])):
            if nested in (*ancestors, model):
                continue  # a model nesting itself, however deep, would never end; none does in 0.26
            paths |= harbor_fields(nested, f"{path}.", (*ancestors, model))
    return paths


def documented_fields(text: str) -> list[str]:
    """The field of each row of the section's table, in order (duplicates kept, to be reported)."""
    fields: list[str] = []
    inside = False
    for line in text.splitlines():
        if line.startswith("## "):
            inside = line.strip() == SECTION
            continue
        if not inside or not line.lstrip().startswith("|"):
            continue
        first_cell = line.strip().split("|")[1]
        match = _FIELD.search(first_cell)
        if match:  # the header and the separator have none
            fields.append(match.group(1).strip())
    return fields


def test_the_walk_reaches_fields_behind_forward_references_lists_and_optionals() -> None:
    """The walk is what the table is checked against: it must see the deepest fields."""
    fields = harbor_fields()
    for path in (
        "schema_version",
        "task.authors.email",
        "environment.mcp_servers.headers",  # list["MCPServerConfig"], a forward reference
        "verifier.collect.timeout_sec",  # list["VerifierCollectConfig"]
        "verifier.environment.healthcheck.retries",  # EnvironmentConfig | None
        "steps.verifier.environment.tpu.topology",  # list[StepConfig] | None, four levels down
        "artifacts.exclude",  # list[str | ArtifactConfig]
        "environment.allow_internet",  # deprecated and left out of dumps, but an author may write it
    ):
        assert path in fields, path
    assert "environment.network_mode.public" not in fields  # enums are values, not models


# A Harbor upgrade as the walk would see it (module level: annotations resolve against this module).
class _Sandbox(BaseModel):
    kernel: str = ""


class _UpgradedTaskConfig(TaskConfig):
    sandboxes: list[_Sandbox] | None = None


def test_a_key_a_harbor_upgrade_adds_would_be_reported_missing() -> None:
    """What an upgrade looks like to the walk: a new section with a key of its own, nested in a list."""
    added = harbor_fields(_UpgradedTaskConfig) - harbor_fields()
    assert added == {"sandboxes", "sandboxes.kernel"}
    assert not added & set(documented_fields(DOC.read_text()))


def test_the_table_is_read_from_its_own_section_only() -> None:
    text = "\n".join(
        [
            "## Harbor conformance",
            "",
            "| field | `container` | `local` |",
            "|---|---|---|",
            "| `agent.user` | **as Harbor** (`docker exec -u`) | **differently** |",
            '| `verifier.env` | **as Harbor**: `"record"|"enforce"` | same |',
            "",
            "## Another section",
            "| `not.this` | x | y |",
        ]
    )
    assert documented_fields(text) == ["agent.user", "verifier.env"]


def test_every_harbor_task_field_has_one_row_in_the_conformance_table() -> None:
    documented = documented_fields(DOC.read_text())
    harbor = harbor_fields()
    missing = sorted(harbor - set(documented))
    unknown = sorted(set(documented) - harbor)
    twice = sorted({field for field in documented if documented.count(field) > 1})
    problems = [
        *(f"{field}: a field of Harbor's task.toml with no row" for field in missing),
        *(f"{field}: a row for a field Harbor does not have" for field in unknown),
        *(f"{field}: more than one row" for field in twice),
    ]
    assert not problems, f'{DOC.name} "{SECTION[3:]}":\n' + "\n".join(problems)
