"""A run's submission made in code, for tests of the scheduler that need no gateway."""

from __future__ import annotations

from regatta_shared.events import (
    AgentSpec,
    ExecutionSettings,
    ModelSpec,
    RunSubmitted,
    RunTask,
    TaskSelection,
)


def submission(
    run_id: str = "r",
    *,
    tasks: int = 3,
    agents: int = 2,
    attempts: int = 2,
    concurrency: int = 4,
    cost_cap: float | None = None,
) -> RunSubmitted:
    """`tasks` tasks t0…, `agents` oracle agents on hosted models m0…, as the gateway would lock them."""
    return RunSubmitted(
        run_id=run_id,
        workspace_id="w",
        name=run_id,
        benchmark_id="b",
        benchmark_name="b",
        benchmark_version="1",
        benchmark_digest="d",
        selection=TaskSelection(),
        tasks=[RunTask(name=f"t{i}", digest=f"sha256:{i}") for i in range(tasks)],
        agents=[
            AgentSpec(index=i, harness="oracle", model=ModelSpec(type="hosted", base_model=f"m{i}"))
            for i in range(agents)
        ],
        execution=ExecutionSettings(
            attempts_per_task=attempts, max_concurrent_attempts=concurrency, cost_cap_usd=cost_cap
        ),
    )
