"""Benchmark metadata: the optional `regatta.toml` beside a dataset and the deployment's declared values.

Two layers, the deployment's over the manifest's, give one BenchmarkMetadata (docs/benchmarks.md).
Every problem names the file (or the deployment) and the field, and fails the sync.
"""

from __future__ import annotations

import fnmatch
import math
import re
import tomllib
from dataclasses import dataclass, field
from typing import Any

from regatta_shared.events import BenchmarkMetadata
from regatta_shared.events.integrity import VERIFIER_INTEGRITY_POLICIES
from regatta_shared.rules.execution_defaults import PASS_THRESHOLD
from regatta_shared.rules.harnesses import HARNESSES

MANIFEST_NAME = "regatta.toml"
SET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
GLOB_CHARS = set("*?[")

# manifest [section].key -> (BenchmarkMetadata field, expected kind)
FIELDS: dict[tuple[str, str], tuple[str, str]] = {
    ("benchmark", "description"): ("description", "string"),
    ("benchmark", "pass_threshold"): ("pass_threshold", "number"),
    ("benchmark", "primary_reward_key"): ("primary_reward_key", "string"),
    ("benchmark", "verifier_integrity"): ("verifier_integrity", "string"),
    ("benchmark", "show_solutions"): ("show_solutions", "boolean"),
    ("harness", "default"): ("default_harness", "string"),
    ("harness", "supported"): ("supports_harness", "boolean"),
    ("harness", "required"): ("requires_harness", "boolean"),
    ("judge", "requires_model"): ("requires_judge_model", "boolean"),
    ("judge", "requires_api_key"): ("requires_judge_api_key", "boolean"),
    ("judge", "default_model"): ("judge_model_default", "string"),
}
SECTIONS = {"benchmark", "harness", "judge", "task_sets"}


class ManifestInvalid(Exception):
    """Metadata that cannot be used; the message names the file or the deployment, and the field."""


@dataclass(frozen=True)
class ManifestFile:
    label: str
    text: str


@dataclass
class DeclaredMetadata:
    values: dict[str, Any] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)


def parse_manifest(manifest: ManifestFile) -> DeclaredMetadata:
    where = f"manifest {manifest.label}"
    try:
        data = tomllib.loads(manifest.text)
    except tomllib.TOMLDecodeError as error:
        raise ManifestInvalid(f"{where}: not valid TOML ({error})") from None
    declared = DeclaredMetadata()
    for key, value in data.items():
        if key == "schema_version":
            if value not in (1, "1"):
                raise ManifestInvalid(f"{where}: schema_version must be 1 (got {value!r})")
        elif key not in SECTIONS or not isinstance(value, dict):
            raise ManifestInvalid(
                f"{where}: unknown key {key!r} (expected [benchmark], [harness], [judge], [task_sets])"
            )
    for (section, key), (name, kind) in FIELDS.items():
        table = data.get(section) or {}
        if key in table:
            declared.values[name] = _typed(f"{where}: [{section}].{key}", table[key], kind)
            declared.origins[name] = f"{where}: [{section}].{key}"
    for section in ("benchmark", "harness", "judge"):
        for key in data.get(section) or {}:
            if (section, key) not in FIELDS:
                raise ManifestInvalid(f"{where}: unknown key [{section}].{key}")
    if "task_sets" in data:
        sets, recommended = _task_sets(where, data["task_sets"])
        declared.values["task_sets"] = sets
        declared.origins["task_sets"] = f"{where}: [task_sets]"
        if recommended is not None:
            declared.values["recommended_task_set"] = recommended
            declared.origins["recommended_task_set"] = f"{where}: [task_sets.{recommended}].recommended"
    return declared


def from_deployment(values: dict[str, Any] | None) -> DeclaredMetadata:
    """Values declared with the benchmark (the deployment's hosted-benchmark JSON or the add request)."""
    declared = DeclaredMetadata()
    for name, value in (values or {}).items():
        if name not in BenchmarkMetadata.model_fields:
            raise ManifestInvalid(f"deployment metadata: unknown field {name!r}")
        declared.values[name] = value
        declared.origins[name] = f"deployment metadata: {name}"
    return declared


def resolve_metadata(
    layers: list[DeclaredMetadata], task_names: list[str], description: str | None = None
) -> BenchmarkMetadata:
    """Later layers win field by field; then cross-field rules and task-set membership are checked."""
    values: dict[str, Any] = {"description": description or None}
    origins: dict[str, str] = {}
    sets: dict[str, Any] = {}
    set_origins: dict[str, str] = {}
    for layer in layers:
        values.update(layer.values)
        origins.update(layer.origins)
        declared_sets = layer.values.get("task_sets") or {}
        if not isinstance(declared_sets, dict):
            raise ManifestInvalid(f"{layer.origins['task_sets']} must map set names to task lists")
        # Task sets merge set by set: a deployment can add or replace one set and keep the manifest's others.
        sets.update(declared_sets)
        set_origins.update(dict.fromkeys(declared_sets, layer.origins.get("task_sets", "task_sets")))

    def origin(name: str) -> str:
        return origins.get(name, name)

    threshold = values.get("pass_threshold", PASS_THRESHOLD)
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not math.isfinite(threshold):
        raise ManifestInvalid(f"{origin('pass_threshold')} must be a finite number (got {threshold!r})")
    policy = values.get("verifier_integrity")
    if policy is not None and policy not in VERIFIER_INTEGRITY_POLICIES:
        allowed = " or ".join(f'"{p}"' for p in VERIFIER_INTEGRITY_POLICIES)
        raise ManifestInvalid(f"{origin('verifier_integrity')} must be {allowed} (got {policy!r})")
    harness = values.get("default_harness")
    if harness is not None and harness not in HARNESSES:
        raise ManifestInvalid(f"{origin('default_harness')}: unknown harness {harness!r}")
    if values.get("requires_harness") and values.get("supports_harness") is False:
        raise ManifestInvalid(f"{origin('requires_harness')}: a required harness needs a supported harness")
    judged = values.get("requires_judge_model") or values.get("requires_judge_api_key")
    if values.get("judge_model_default") and not judged:
        raise ManifestInvalid(
            f"{origin('judge_model_default')}: a default judge model needs a judge "
            "(requires_model or requires_api_key)"
        )
    values["task_sets"] = _expand_sets(sets, task_names, set_origins)
    recommended = values.get("recommended_task_set")
    if recommended is not None and recommended not in values["task_sets"]:
        raise ManifestInvalid(f"{origin('recommended_task_set')}: no task set named {recommended!r}")
    try:
        return BenchmarkMetadata.model_validate(values)
    except ValueError as error:
        raise ManifestInvalid(f"benchmark metadata is invalid: {error}") from None


def _typed(where: str, value: Any, kind: str) -> Any:
    ok = {
        "string": isinstance(value, str) and bool(value.strip()),
        "boolean": isinstance(value, bool),
        "number": isinstance(value, (int, float)) and not isinstance(value, bool),
    }[kind]
    if not ok:
        article = "an" if kind[0] in "aeiou" else "a"
        raise ManifestInvalid(f"{where} must be {article} {kind} (got {value!r})")
    return value.strip() if kind == "string" else value


def _task_sets(where: str, table: Any) -> tuple[dict[str, list[str]], str | None]:
    sets: dict[str, list[str]] = {}
    recommended: list[str] = []
    for name, entry in table.items():
        key = f"{where}: [task_sets.{name}]"
        if not SET_NAME.match(name):
            raise ManifestInvalid(f"{key}: a task set name uses letters, digits, '.', '_' and '-'")
        if isinstance(entry, dict):
            unknown = set(entry) - {"tasks", "recommended"}
            if unknown:
                raise ManifestInvalid(
                    f"{key}: unknown key {sorted(unknown)[0]!r} (expected tasks, recommended)"
                )
            if not isinstance(entry.get("recommended", False), bool):
                raise ManifestInvalid(f"{key}.recommended must be a boolean")
            if entry.get("recommended"):
                recommended.append(name)
            entry = entry.get("tasks")
        if not isinstance(entry, list) or not entry or not all(isinstance(t, str) and t for t in entry):
            raise ManifestInvalid(f"{key}: tasks must be a non-empty list of task names")
        sets[name] = entry
    if len(recommended) > 1:
        raise ManifestInvalid(f"{where}: only one task set can be recommended (got {', '.join(recommended)})")
    return sets, (recommended[0] if recommended else None)


def _expand_sets(
    sets: dict[str, Any], task_names: list[str], origins: dict[str, str]
) -> dict[str, list[str]]:
    known = set(task_names)
    expanded: dict[str, list[str]] = {}
    for name, patterns in sets.items():
        where = origins[name]
        if not isinstance(patterns, list) or not patterns or not all(isinstance(p, str) for p in patterns):
            raise ManifestInvalid(f"{where}: task set {name!r} must be a non-empty list of task names")
        chosen: list[str] = []
        for pattern in patterns:
            if GLOB_CHARS & set(pattern):
                matches = [t for t in task_names if fnmatch.fnmatchcase(t, pattern)]
                if not matches:
                    raise ManifestInvalid(f"{where}: task set {name!r}: pattern {pattern!r} matches no task")
            elif pattern in known:
                matches = [pattern]
            else:
                raise ManifestInvalid(f"{where}: task set {name!r} names unknown task {pattern!r}")
            chosen.extend(m for m in matches if m not in chosen)
        expanded[name] = chosen
    return expanded
