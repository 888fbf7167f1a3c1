"""A run request resolved against its benchmark before anything is recorded: the tasks it selects (from
the ready sync's task list, read once per process), its agents (harness known, hosted models admitted),
its execution settings (the LLM judge's requirements) and which field names a missing secret."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from regatta_shared.events import AgentSpec, ExecutionSettings, ModelSpec, RunTask, TaskResources
from regatta_shared.eventstore import EventStore
from regatta_shared.rules import execution_defaults as defaults
from regatta_shared.rules.benchmark_status import IN_PROGRESS, READY
from regatta_shared.rules.ceilings import Ceilings
from regatta_shared.rules.harnesses import HARNESSES
from regatta_shared.rules.hosted_models import HostedModel
from regatta_shared.settings import load_settings
from sqlalchemy import select

from regatta_gateway.admission.hosted_models import admit_hosted
from regatta_gateway.commands.runconfig import ExecutionConfig, RunRequest, TasksConfig
from regatta_gateway.errors import Invalid
from regatta_gateway.principals import Scope
from regatta_gateway.queries.benchmarks import find_benchmark
from regatta_gateway.queries.cached_reads import LRU
from regatta_gateway.readmodels import tables as t


class Selection(Protocol):
    """What the task selection reads of a request: a submission's, or a preview's (run_preview.py)."""

    @property
    def tasks_config(self) -> TasksConfig | None: ...

    @property
    def execution_config(self) -> ExecutionConfig | None: ...


def ready_benchmark(store: EventStore, scope: Scope, key: str) -> dict[str, Any]:
    """The benchmark a request names, if its tasks are synced: a run is resolved against a ready sync."""
    benchmark = find_benchmark(store, scope, key, field="experiment_config.benchmark")
    if benchmark["status"] != READY:
        raise Invalid(
            f"Benchmark {benchmark['name']!r} is not ready (sync status: {benchmark['status']})",
            field="experiment_config.benchmark",
            issues=[
                {
                    "key": "experiment.benchmark",
                    "message": "benchmark is still syncing"
                    if benchmark["status"] in IN_PROGRESS
                    else "benchmark sync failed",
                }
            ],
        )
    return benchmark


def select_tasks(store: EventStore, benchmark: dict[str, Any], request: Selection) -> list[RunTask]:
    """The valid tasks the request selects, each within the operator's current ceilings."""
    synced = _synced_tasks(store, benchmark["id"], benchmark["ready_sync_id"])
    tasks = _selected(list(synced.tasks), synced.invalid, benchmark, request)
    execution = request.execution_config
    multiplier = execution.timeout_multiplier if execution else defaults.TIMEOUT_MULTIPLIER
    # Read per submission: a ceiling lowered since the sync applies to the next run, not the next sync.
    ceilings = Ceilings.of_host(load_settings())
    issues = [
        {"key": "tasks", "message": f"task {task.name!r}: {over}"}
        for task in tasks
        for over in ceilings.violations(synced.resources.get(task.name), multiplier)
    ]
    if issues:
        more = f" (and {len(issues) - 1} more)" if len(issues) > 1 else ""
        raise Invalid(issues[0]["message"] + more, field="tasks", issues=issues[:100], code="VALIDATION")
    return tasks


def _selected(
    tasks: list[RunTask], invalid: dict[str, str], benchmark: dict[str, Any], request: Selection
) -> list[RunTask]:
    selection = request.tasks_config
    if selection is None:
        return tasks
    issues = []
    if selection.task_set:
        sets = (benchmark["metadata"] or {}).get("task_sets") or {}
        if selection.task_set not in sets:
            issues.append(
                {"key": "tasks.task_set", "message": f"benchmark has no task set {selection.task_set!r}"}
            )
        else:
            wanted = set(sets[selection.task_set])
            tasks = [task for task in tasks if task.name in wanted]
    if selection.categories:
        known = {task.category for task in tasks}
        unknown = [c for c in selection.categories if c not in known]
        if unknown:
            issues.append({"key": "tasks.categories", "message": f"unknown categories: {', '.join(unknown)}"})
        tasks = [task for task in tasks if task.category in set(selection.categories)]
    if selection.task_names:
        known_names = {task.name for task in tasks}
        named_invalid = [n for n in selection.task_names if n in invalid]
        for name in named_invalid[:20]:
            issues.append(
                {"key": "tasks.task_names", "message": f"task {name!r} is invalid: {invalid[name]}"}
            )
        unknown = [n for n in selection.task_names if n not in known_names and n not in invalid]
        if unknown:
            issues.append({"key": "tasks.task_names", "message": f"unknown tasks: {', '.join(unknown[:20])}"})
        tasks = [task for task in tasks if task.name in set(selection.task_names)]
    if issues:
        raise Invalid("Invalid task selection", field=issues[0]["key"], issues=issues, code="VALIDATION")
    if not tasks:
        raise Invalid("The task selection is empty", field="tasks", code="VALIDATION")
    return tasks


@dataclass(frozen=True)
class SyncedTasks:
    tasks: tuple[RunTask, ...]  # the valid ones, in the dataset's order
    resources: dict[str, TaskResources | None]
    invalid: dict[str, str]  # name -> reason


_SYNCED_TASKS: LRU[tuple[str, str, str], SyncedTasks] = LRU(64)


def _synced_tasks(store: EventStore, benchmark_id: str, sync_id: str) -> SyncedTasks:
    """A ready sync's task list. A sync's tasks never change once it is ready (a re-sync has a new id),
    so each process reads it once: 2,000 rows were a third of a submission's CPU."""
    key = (store.url, benchmark_id, sync_id)
    found = _SYNCED_TASKS.get(key)
    if found is not None:
        return found
    columns = t.benchmark_tasks.c
    with store.read_engine.connect() as conn:
        rows = conn.execute(
            select(columns.name, columns.digest, columns.category, columns.resources, columns.invalid_reason)
            .where(columns.benchmark_id == benchmark_id, columns.sync_id == sync_id)
            .order_by(columns.ordinal)
        ).all()
    synced = SyncedTasks(
        tasks=tuple(
            RunTask(name=name, digest=digest, category=category)
            for name, digest, category, _resources, reason in rows
            if reason is None
        ),
        resources={
            row.name: TaskResources.model_validate(row.resources) if row.resources else None
            for row in rows
            if row.invalid_reason is None
        },
        invalid={row.name: row.invalid_reason for row in rows if row.invalid_reason is not None},
    )
    _SYNCED_TASKS.put(key, synced)
    return synced


def agent_specs(
    request: RunRequest, metadata: dict[str, Any], hosted: tuple[HostedModel, ...]
) -> tuple[list[AgentSpec], dict[str, str]]:
    """The agents, and the keys of their hosted models to seal into the run."""
    agents = []
    issues = []
    keys: dict[str, str] = {}
    for index, entry in enumerate(request.agents):
        harness = entry.harness or metadata.get("default_harness")
        if not harness:
            issues.append(
                {"key": f"agents.{index}.harness", "message": "harness is required for this benchmark"}
            )
            continue
        if harness not in HARNESSES:
            issues.append({"key": f"agents.{index}.harness", "message": f"unknown harness {harness!r}"})
            continue
        model, key, refused = admit_hosted(index, harness, ModelSpec(**entry.model.model_dump()), hosted)
        if refused:
            issues += refused
            continue
        keys.update(key)
        agents.append(
            AgentSpec(
                index=index,
                harness=harness,
                model=model,
                env=entry.env,
                harness_api_key_secret=entry.harness_api_key_secret,
            )
        )
    if issues:
        # The first issue's message is the error's own: "Invalid agents" alone would hide why.
        message = f"Invalid agents: {issues[0]['key']}: {issues[0]['message']}"
        raise Invalid(message, field=issues[0]["key"], issues=issues, code="VALIDATION")
    return agents, keys


def execution_settings(request: RunRequest, metadata: dict[str, Any]) -> ExecutionSettings:
    execution = request.execution_config
    values = execution.model_dump() if execution else {}
    judged = metadata.get("requires_judge_model") or metadata.get("requires_judge_api_key")
    if not judged:
        for key in ("judge_model", "judge_api_key_secret"):
            if values.get(key):
                raise Invalid(
                    f"{key} is only allowed for benchmarks with an LLM judge",
                    field=f"execution_config.{key}",
                    code="VALIDATION",
                    issues=[{"key": f"execution.{key}", "message": "benchmark has no LLM judge"}],
                )
    else:
        if not values.get("judge_model"):
            values["judge_model"] = metadata.get("judge_model_default")
        # Refused here, not per attempt: without them every attempt's verifier would fail to grade.
        needed = [
            ("judge_model", "this benchmark's LLM judge needs a judge model", "requires_judge_model"),
            (
                "judge_api_key_secret",
                "this benchmark's LLM judge needs an API key secret",
                "requires_judge_api_key",
            ),
        ]
        issues = [
            {"key": f"execution.{key}", "message": message}
            for key, message, flag in needed
            if metadata.get(flag) and not values.get(key)
        ]
        if issues:
            key = issues[0]["key"].removeprefix("execution.")
            raise Invalid(
                issues[0]["message"], field=f"execution_config.{key}", code="VALIDATION", issues=issues
            )
    if values.get("pass_threshold") is None:
        values["pass_threshold"] = float(metadata.get("pass_threshold", defaults.PASS_THRESHOLD))
    if values.get("verifier_integrity") is None:
        values["verifier_integrity"] = metadata.get("verifier_integrity") or defaults.VERIFIER_INTEGRITY
    return ExecutionSettings(**values)


def secret_field(request: RunRequest, name: str) -> str:
    """Where the config references a secret, so the error names the field."""
    for index, agent in enumerate(request.agents):
        if getattr(agent.model, "api_key_secret", None) == name:
            return f"agents.{index}.model.api_key_secret"
        if agent.harness_api_key_secret == name:
            return f"agents.{index}.harness_api_key_secret"
    execution = request.execution_config
    if execution and execution.judge_api_key_secret == name:
        return "execution_config.judge_api_key_secret"
    if execution and name in execution.verifier_secrets:
        return "execution_config.verifier_secrets"
    return "secrets.required"
