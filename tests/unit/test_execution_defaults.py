"""The execution defaults are defined once (regatta_shared.rules.execution_defaults): the run config a
submission is completed with, the event that records it, the job an executor gets, the standard scoring
conditions and the user docs all say the same."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

from regatta_gateway.commands.runconfig import ExecutionConfig
from regatta_shared.events import AgentSpec, BenchmarkMetadata, ExecutionSettings, ModelSpec
from regatta_shared.events.integrity import VERIFIER_INTEGRITY_POLICIES, AttemptIntegrity, VerifierIntegrity
from regatta_shared.messaging.jobs import AttemptJob
from regatta_shared.rules import execution_defaults
from regatta_shared.rules.conditions import ScoringConditions, standard_conditions

DOCS = Path(__file__).resolve().parents[2] / "docs"
_ROW = re.compile(r"^\| `([a-z_]+)` \| ([^|]+?) \|", re.MULTILINE)


def _documented(text: str) -> dict[str, float | str]:
    """Each setting's default as the table states it: the number it ends with, or the `word` it ends
    with (a setting whose values are words, such as a policy)."""
    found: dict[str, float | str] = {}
    for key, default in _ROW.findall(text):
        number = re.search(r"-?\d+(\.\d+)?$", default.strip())
        word = re.search(r"`([a-z_]+)`$", default.strip())
        assert number or word, (
            f"docs/runs.md: the default of {key} is neither a number nor a `word` ({default!r})"
        )
        found[key] = float(number.group(0)) if number else word.group(1)  # type: ignore[union-attr]
    return found


def test_the_run_docs_list_every_default_as_defined() -> None:
    section = (DOCS / "runs.md").read_text().split("## Execution settings", 1)[1].split("\n## ", 1)[0]
    assert _documented(section) == execution_defaults.DEFAULTS


def test_the_standard_conditions_table_states_the_defaults() -> None:
    text = (DOCS / "benchmarks.md").read_text()
    row = re.compile(
        r"^\| (pass threshold|timeout multiplier|retries|verifier integrity) \| ([^|]+?) \|", re.MULTILINE
    )
    rows = dict(row.findall(text))
    assert float(rows["timeout multiplier"]) == execution_defaults.TIMEOUT_MULTIPLIER
    assert int(rows["retries"]) == execution_defaults.MAX_RETRIES
    assert rows["pass threshold"].endswith(f"(default {execution_defaults.PASS_THRESHOLD})")
    assert rows["verifier integrity"].endswith(f"(default `{execution_defaults.VERIFIER_INTEGRITY}`)")


def test_every_layer_completes_an_empty_execution_table_with_the_defaults() -> None:
    config = ExecutionConfig().model_dump()
    recorded = ExecutionSettings().model_dump()
    for key in ("attempts_per_task", "max_concurrent_attempts", "timeout_multiplier", "max_retries"):
        assert config[key] == recorded[key] == execution_defaults.DEFAULTS[key], key
    job = AttemptJob(
        run_id="r",
        attempt_id="a",
        agent=AgentSpec(index=0, harness="oracle", model=ModelSpec(type="hosted", base_model="m")),
        task="t",
        task_digest="d",
        attempt_index=0,
    )
    assert (job.timeout_multiplier, job.max_retries, job.pass_threshold, job.verifier_integrity) == (
        execution_defaults.TIMEOUT_MULTIPLIER,
        execution_defaults.MAX_RETRIES,
        execution_defaults.PASS_THRESHOLD,
        execution_defaults.VERIFIER_INTEGRITY,
    )
    standard = standard_conditions(None, None)
    assert standard == ScoringConditions()
    assert (standard.pass_threshold, standard.timeout_multiplier, standard.max_retries) == (
        execution_defaults.PASS_THRESHOLD,
        execution_defaults.TIMEOUT_MULTIPLIER,
        execution_defaults.MAX_RETRIES,
    )
    assert BenchmarkMetadata().pass_threshold == execution_defaults.PASS_THRESHOLD


def test_every_layer_names_the_same_verifier_integrity_policies_and_default() -> None:
    """The run config leaves the policy to the benchmark (None); every layer after it completes it with the
    same default, from the same two words."""
    assert ExecutionConfig().verifier_integrity is None
    default = execution_defaults.VERIFIER_INTEGRITY
    assert ExecutionSettings().verifier_integrity == default
    assert BenchmarkMetadata().verifier_integrity == default
    assert standard_conditions(None, None).verifier_integrity == default
    assert AttemptIntegrity().policy == default
    assert default in VERIFIER_INTEGRITY_POLICIES
    # conditions.py spells the policies out (the events package imports it): the same words.
    conditions_policies = get_args(ScoringConditions.model_fields["verifier_integrity"].annotation)
    assert conditions_policies == get_args(VerifierIntegrity) == VERIFIER_INTEGRITY_POLICIES
