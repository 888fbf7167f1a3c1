"""Run commands: submit (validated, tasks selected, secrets sealed) and stop, recorded as events."""

from __future__ import annotations

import re
from typing import Any

from regatta_shared import run_keys
from regatta_shared.clock import isoformat
from regatta_shared.conditions import standard_conditions
from regatta_shared.envelope import new_event
from regatta_shared.events import (
    AgentSpec,
    ExecutionSettings,
    ModelSpec,
    RunStopRequested,
    RunSubmitted,
    RunTask,
    TaskSelection,
)
from regatta_shared.eventstore import EventStore, WrongExpectedVersion
from regatta_shared.harnesses import HARNESSES
from regatta_shared.hosted_models import HostedModel
from regatta_shared.ids import new_id, run_stream
from regatta_shared.runs import TERMINAL
from regatta_shared.sealing import new_run_key, seal_for_run, wrap_run_key
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from regatta_gateway.admission.hosted_models import admit_hosted
from regatta_gateway.commands.runconfig import ConfigError, RunRequest, parse_request, toml_to_request
from regatta_gateway.http.auth import Scope
from regatta_gateway.http.errors import ApiError
from regatta_gateway.notifications.registry import check_budget
from regatta_gateway.queries.benchmarks import find_benchmark, find_run
from regatta_gateway.queries.cached_reads import LRU
from regatta_gateway.queries.runtoml import resolved_toml
from regatta_gateway.readmodels import tables as t
from regatta_gateway.secrets.store import SecretVault, resolve_secrets


def parse_submission(raw: bytes, content_type: str) -> RunRequest:
    try:
        if "toml" in content_type:
            return parse_request(toml_to_request(raw.decode("utf-8", errors="replace")))
        import json

        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError as error:
            raise ConfigError([{"key": "(body)", "message": f"malformed JSON: {error}"}]) from None
        if not isinstance(body, dict):
            raise ConfigError([{"key": "(body)", "message": "expected a JSON object"}])
        return parse_request(body)
    except ConfigError as error:
        raise ApiError(
            400,
            "Invalid benchmark config",
            code="VALIDATION",
            issues=error.issues,
            field=error.issues[0]["key"] if error.issues else None,
        ) from None


def submit_run(
    store: EventStore,
    scope: Scope,
    request: RunRequest,
    vault: SecretVault,
    hosted: tuple[HostedModel, ...] = (),
) -> dict[str, Any]:
    """`hosted`: the deployment's declared hosted models (REGATTA_HOSTED_MODELS)."""
    benchmark = find_benchmark(
        store, scope, request.experiment_config.benchmark, field="experiment_config.benchmark"
    )
    if benchmark["status"] != "ready":
        raise ApiError(
            400,
            f"Benchmark {benchmark['name']!r} is not ready (sync status: {benchmark['status']})",
            field="experiment_config.benchmark",
            issues=[
                {
                    "key": "experiment.benchmark",
                    "message": "benchmark is still syncing"
                    if benchmark["status"] in ("pending", "syncing")
                    else "benchmark sync failed",
                }
            ],
        )
    metadata = benchmark["metadata"] or {}
    tasks = _select_tasks(store, benchmark, request)
    agents, hosted_keys = _agents(request, metadata, hosted)
    execution = _execution(request, metadata)
    names = request.referenced_secrets()
    values, scopes, missing = resolve_secrets(vault, scope, names)
    if missing:
        raise ApiError(
            404,
            f"Secret(s) not found: {', '.join(missing)}",
            code="NOT_FOUND",
            field=_secret_field(request, missing[0]),
            missing_secrets=missing,
        )
    check_budget(store, scope)
    provided = request.secrets.provided if request.secrets else {}
    sealed = {**values, **provided, **hosted_keys}
    run_id = new_id("run")
    # A fresh data key per run (never derived from the master key), so deleting its row when the run
    # ends makes the blob below unreadable forever, although the event log keeps it.
    run_key = new_run_key() if sealed else None
    name = request.name or f"{_slug(benchmark['name'])}-{run_id[-6:]}"
    selection = TaskSelection(**(request.tasks_config.model_dump() if request.tasks_config else {}))
    submitted = RunSubmitted(
        run_id=run_id,
        workspace_id=scope.workspace_id,
        name=name,
        benchmark_id=benchmark["id"],
        benchmark_name=benchmark["name"],
        benchmark_version=benchmark["version"],
        benchmark_digest=benchmark["digest"],
        selection=selection,
        tasks=tasks,
        agents=agents,
        execution=execution,
        env=request.env_config,
        secret_names=list(dict.fromkeys([*names, *provided])),
        secret_scopes=scopes,
        sealed_secrets=seal_for_run(sealed, run_key, run_id) if run_key else None,
        primary_reward_key=metadata.get("primary_reward_key"),
        standard_conditions=standard_conditions(
            metadata.get("pass_threshold"), metadata.get("primary_reward_key")
        ),
        recommended_task_set=metadata.get("recommended_task_set"),
    )
    submitted = submitted.model_copy(update={"config_toml": resolved_toml(submitted, benchmark)})
    recorded = [new_event(submitted, actor=scope.principal.user_id, workspace_id=scope.workspace_id)]
    try:
        with store.transaction() as conn:
            if run_key:
                run_keys.save(conn, run_id, wrap_run_key(run_key, vault.sealing_key, run_id))
            stored = store.append_within(conn, run_stream(run_id), recorded, 0)
    except (WrongExpectedVersion, IntegrityError):
        raise ApiError(409, "Run id collision; retry", code="CONFLICT") from None
    return {
        "id": run_id,
        "name": name,
        "status": "pending",
        "created_at": isoformat(stored[0].recorded_at),
        "task_count": len(tasks),
        "workflow_id": run_id,
    }


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "run"


def _select_tasks(store: EventStore, benchmark: dict[str, Any], request: RunRequest) -> list[RunTask]:
    tasks = list(_synced_tasks(store, benchmark["id"], benchmark["ready_sync_id"]))
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
        unknown = [n for n in selection.task_names if n not in known_names]
        if unknown:
            issues.append({"key": "tasks.task_names", "message": f"unknown tasks: {', '.join(unknown[:20])}"})
        tasks = [task for task in tasks if task.name in set(selection.task_names)]
    if issues:
        raise ApiError(
            400, "Invalid task selection", field=issues[0]["key"], issues=issues, code="VALIDATION"
        )
    if not tasks:
        raise ApiError(400, "The task selection is empty", field="tasks", code="VALIDATION")
    return tasks


_SYNCED_TASKS: LRU[tuple[str, str, str], tuple[RunTask, ...]] = LRU(64)


def _synced_tasks(store: EventStore, benchmark_id: str, sync_id: str) -> tuple[RunTask, ...]:
    """A ready sync's task list. A sync's tasks never change once it is ready (a re-sync has a new id),
    so each process reads it once: 2,000 rows were a third of a submission's CPU."""
    key = (store.url, benchmark_id, sync_id)
    found = _SYNCED_TASKS.get(key)
    if found is not None:
        return found
    with store.read_engine.connect() as conn:
        rows = conn.execute(
            select(t.benchmark_tasks.c.name, t.benchmark_tasks.c.digest, t.benchmark_tasks.c.category)
            .where(t.benchmark_tasks.c.benchmark_id == benchmark_id, t.benchmark_tasks.c.sync_id == sync_id)
            .order_by(t.benchmark_tasks.c.ordinal)
        )
        tasks = tuple(RunTask(name=name, digest=digest, category=category) for name, digest, category in rows)
    _SYNCED_TASKS.put(key, tasks)
    return tasks


def _agents(
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
        raise ApiError(400, message, field=issues[0]["key"], issues=issues, code="VALIDATION")
    return agents, keys


def _execution(request: RunRequest, metadata: dict[str, Any]) -> ExecutionSettings:
    execution = request.execution_config
    values = execution.model_dump() if execution else {}
    judged = metadata.get("requires_judge_model") or metadata.get("requires_judge_api_key")
    if not judged:
        for key in ("judge_model", "judge_api_key_secret"):
            if values.get(key):
                raise ApiError(
                    400,
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
            raise ApiError(
                400, issues[0]["message"], field=f"execution_config.{key}", code="VALIDATION", issues=issues
            )
    if values.get("pass_threshold") is None:
        values["pass_threshold"] = float(metadata.get("pass_threshold", 1.0))
    return ExecutionSettings(**values)


def _secret_field(request: RunRequest, name: str) -> str:
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


def stop_run(store: EventStore, scope: Scope, key: str, reason: str = "stopped by user") -> None:
    run = find_run(store, scope, key)
    if run["status"] in TERMINAL:
        raise ApiError(409, f"Run is already {run['status']}", code="CONFLICT")
    requested = RunStopRequested(run_id=run["id"], reason=reason)
    store.append(
        run_stream(run["id"]),
        [new_event(requested, actor=scope.principal.user_id, workspace_id=scope.workspace_id)],
    )
