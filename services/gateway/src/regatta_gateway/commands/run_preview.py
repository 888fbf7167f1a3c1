"""What a submission would schedule, asked without submitting it (the New Run form's preview): the
benchmark, task selection and execution settings resolved as a submission resolves them
(run_resolution.py), counted by the rule the scheduler queues by (regatta_shared.runs). Nothing is
recorded."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from regatta_shared.eventstore import EventStore
from regatta_shared.runs import attempts_per_agent, expected_attempts

from regatta_gateway.commands.run_resolution import ready_benchmark, select_tasks
from regatta_gateway.commands.runconfig import MAX_AGENTS, ExecutionConfig, Experiment, TasksConfig
from regatta_gateway.principals import Scope


class PreviewRequest(BaseModel):
    """The parts of a submission body the count depends on, checked as a submission checks them. The
    agents are only counted: a form being filled in has agents without a model yet, and submitting
    checks them."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)
    experiment_config: Experiment
    agents: list[dict[str, Any]] = Field(default_factory=list, max_length=MAX_AGENTS)
    tasks_config: TasksConfig | None = None
    execution_config: ExecutionConfig | None = None


def preview_run(store: EventStore, scope: Scope, request: PreviewRequest) -> dict[str, Any]:
    """The attempts the run would make: its tasks, agents and attempts per task, and their product."""
    benchmark = ready_benchmark(store, scope, request.experiment_config.benchmark)
    tasks = select_tasks(store, benchmark, request)
    execution = request.execution_config or ExecutionConfig()
    planned = {
        "tasks": [task.model_dump() for task in tasks],
        "agents": request.agents,
        "execution": execution.model_dump(),
    }
    return {
        "tasks": len(tasks),
        "agents": len(request.agents),
        "attempts_per_task": execution.attempts_per_task,
        "attempts_per_agent": attempts_per_agent(planned),
        "expected_attempts": expected_attempts(planned),
    }
