"""Run commands: submit (validated, resolved against the benchmark by run_resolution.py, secrets sealed)
and stop, recorded as events."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel
from regatta_shared import run_keys
from regatta_shared.clock import isoformat
from regatta_shared.conditions import benchmark_standard
from regatta_shared.envelope import new_event
from regatta_shared.events import RunStopRequested, RunSubmitted, TaskSelection
from regatta_shared.eventstore import EventStore, WrongExpectedVersion
from regatta_shared.hosted_models import HostedModel
from regatta_shared.ids import new_id, run_stream
from regatta_shared.runs.status import PENDING, TERMINAL
from regatta_shared.sealing import new_run_key, seal_for_run, wrap_run_key
from sqlalchemy.exc import IntegrityError

from regatta_gateway.admission.model_names import model_warnings
from regatta_gateway.commands.run_resolution import (
    agent_specs,
    execution_settings,
    ready_benchmark,
    secret_field,
    select_tasks,
)
from regatta_gateway.commands.runconfig import ConfigError, RunRequest, parse_request, toml_to_request
from regatta_gateway.commands.toml_terms import in_file_terms
from regatta_gateway.errors import Conflict, Invalid, NotFound, Refused
from regatta_gateway.notifications.registry import check_budget
from regatta_gateway.principals import Scope
from regatta_gateway.queries.benchmarks import find_run
from regatta_gateway.queries.runtoml import run_toml
from regatta_gateway.secrets.store import SecretVault, resolve_secrets


def parse_submission[M: BaseModel](raw: bytes, content_type: str, model: type[M] = RunRequest) -> M:
    if "toml" in content_type:
        text = raw.decode("utf-8", errors="replace")
        try:
            return parse_request(toml_to_request(text), model)
        except ConfigError as error:
            raise _invalid(in_file_terms(error.issues, text)) from None
    try:
        import json

        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError as error:
            raise ConfigError([{"key": "(body)", "message": f"malformed JSON: {error}"}]) from None
        if not isinstance(body, dict):
            raise ConfigError([{"key": "(body)", "message": "expected a JSON object"}])
        return parse_request(body, model)
    except ConfigError as error:
        raise _invalid(error.issues) from None


def _invalid(issues: list[dict[str, Any]]) -> Refused:
    return Invalid(
        "Invalid benchmark config",
        code="VALIDATION",
        issues=issues,
        field=issues[0]["key"] if issues else None,
    )


def submit_run(
    store: EventStore,
    scope: Scope,
    request: RunRequest,
    vault: SecretVault,
    hosted: tuple[HostedModel, ...] = (),
) -> dict[str, Any]:
    """`hosted`: the deployment's declared hosted models (REGATTA_HOSTED_MODELS)."""
    benchmark = ready_benchmark(store, scope, request.experiment_config.benchmark)
    metadata = benchmark["metadata"] or {}
    tasks = select_tasks(store, benchmark, request)
    agents, hosted_keys = agent_specs(request, metadata, hosted)
    execution = execution_settings(request, metadata)
    names = request.referenced_secrets()
    values, scopes, missing = resolve_secrets(vault, scope, names)
    if missing:
        raise NotFound(
            f"Secret(s) not found: {', '.join(missing)}",
            code="NOT_FOUND",
            field=secret_field(request, missing[0]),
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
        standard_conditions=benchmark_standard(metadata),
        recommended_task_set=metadata.get("recommended_task_set"),
        scratch=benchmark["source_type"] == "upload",
    )
    submitted = submitted.model_copy(update={"config_toml": run_toml(submitted.model_dump(mode="json"))})
    recorded = [new_event(submitted, actor=scope.principal.user_id, workspace_id=scope.workspace_id)]
    try:
        with store.transaction() as conn:
            if run_key:
                run_keys.save(conn, run_id, wrap_run_key(run_key, vault.sealing_key, run_id))
            stored = store.append_within(conn, run_stream(run_id), recorded, 0)
    except (WrongExpectedVersion, IntegrityError):
        raise Conflict("Run id collision; retry", code="CONFLICT") from None
    return {
        "id": run_id,
        "name": name,
        "status": PENDING,
        "created_at": isoformat(stored[0].recorded_at),
        "task_count": len(tasks),
        "workflow_id": run_id,
        "warnings": model_warnings(agents),
    }


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "run"


def stop_run(store: EventStore, scope: Scope, key: str, reason: str = "stopped by user") -> None:
    run = find_run(store, scope, key)
    if run["status"] in TERMINAL:
        raise Conflict(f"Run is already {run['status']}", code="CONFLICT")
    requested = RunStopRequested(run_id=run["id"], reason=reason)
    store.append(
        run_stream(run["id"]),
        [new_event(requested, actor=scope.principal.user_id, workspace_id=scope.workspace_id)],
    )
