"""Shared helpers of the bench scripts: throwaway databases, a realistic event log, timing and tables.

The log generator writes events as the services do (RunSubmitted, RunQueued, AttemptScheduled/Started/
Finished with a few AttemptRetried, provisional and final RunScored, RunFinished, LeaderboardComputed).
Payload dicts are built from templates for speed and checked against the pydantic models of
`regatta_shared.events`: `validate_every=1` checks every event, larger values a regular sample.
"""

from __future__ import annotations

import math
import os
import random
import statistics
import sys
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from regatta_shared.events import (
    AgentScores,
    AgentSpec,
    ApiTokenCreated,
    AttemptFinished,
    BenchmarkAdded,
    BenchmarkSource,
    BenchmarkSyncCompleted,
    BenchmarkSyncRequested,
    BenchmarkSyncStarted,
    BenchmarkTasksSynced,
    Event,
    ExecutionSettings,
    LeaderboardComputed,
    MemberAdded,
    MetricValue,
    ModelSpec,
    RunExecutionCompleted,
    RunFinished,
    RunScored,
    RunStarted,
    RunSubmitted,
    RunTask,
    TaskInfo,
    TaskSelection,
    UserRegistered,
    WorkspaceCreated,
    parse_event,
)
from regatta_shared.eventstore import NewEvent
from regatta_shared.ids import attempt_id, benchmark_stream, leaderboard_stream, run_stream, workspace_stream
from regatta_shared.rules.scoring_rules import RULES_VERSION
from sqlalchemy import create_engine, text

ROOT = Path(__file__).resolve().parents[1]
ADMIN_URL = os.environ.get("REGATTA_BENCH_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")


# --- environment ----------------------------------------------------------------------------------


def machine_state() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{os.cpu_count()} CPUs, load average {one:.1f} / {five:.1f} / {fifteen:.1f} (1 / 5 / 15 min)"


@contextmanager
def postgres_database(prefix: str) -> Iterator[str]:
    """A fresh database on the bench Postgres, dropped (WITH FORCE) however the bench ends."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def libpq_url(sqlalchemy_url: str) -> str:
    """The same database for plain psycopg (no `+psycopg` driver suffix)."""
    return sqlalchemy_url.replace("postgresql+psycopg://", "postgresql://", 1)


# --- reporting ------------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A small GitHub-markdown table (so it pastes into docs/performance.md as is)."""
    cells = [[str(h) for h in headers]] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- the event log --------------------------------------------------------------------------------

ADMIN_USER = "usr_bench"
SCHEDULER = "run-scheduler"
SCORING = "scoring"


def _new(payload: Event, actor: str) -> NewEvent:
    return NewEvent(str(uuid.uuid4()), payload.type_name, payload.model_dump(mode="json"), {"actor": actor})


def identity_events(workspace_id: str, token_hash: str) -> tuple[str, list[NewEvent]]:
    """The bootstrap admin: workspace, user, membership and one API token."""
    events = [
        _new(WorkspaceCreated(workspace_id=workspace_id, name="default"), "system"),
        _new(UserRegistered(user_id=ADMIN_USER, email="admin@localhost", name="admin"), "system"),
        _new(MemberAdded(workspace_id=workspace_id, user_id=ADMIN_USER, role="admin"), "system"),
        _new(
            ApiTokenCreated(token_id="tok_bench", user_id=ADMIN_USER, token_hash=token_hash, name="bench"),
            "system",
        ),
    ]
    return workspace_stream(workspace_id), events


@dataclass(frozen=True)
class BenchTask:
    name: str
    digest: str
    category: str
    difficulty: float


def make_tasks(count: int, rng: random.Random) -> list[BenchTask]:
    categories = ["algorithms", "data", "debugging", "devops", "security", "web"]
    return [
        BenchTask(
            name=f"task-{i:05d}",
            digest="sha256:" + uuid.UUID(int=rng.getrandbits(128)).hex * 2,
            category=categories[i % len(categories)],
            difficulty=rng.gauss(0.0, 1.5),
        )
        for i in range(count)
    ]


def benchmark_events(
    benchmark_id: str,
    workspace_id: str,
    tasks: list[BenchTask],
    page_size: int = 100,
    actor: str = ADMIN_USER,
) -> tuple[str, list[NewEvent]]:
    """A registry benchmark added and synced page by page."""
    sync_id = f"sync_{benchmark_id}"
    source = BenchmarkSource(
        type="registry", ref=f"bench-{benchmark_id}@1.0", dataset=f"bench-{benchmark_id}"
    )
    events = [
        _new(
            BenchmarkAdded(
                benchmark_id=benchmark_id, workspace_id=workspace_id, name=benchmark_id, source=source
            ),
            actor,
        ),
        _new(BenchmarkSyncRequested(benchmark_id=benchmark_id, sync_id=sync_id), actor),
        _new(
            BenchmarkSyncStarted(benchmark_id=benchmark_id, sync_id=sync_id, total=len(tasks), version="1.0"),
            "registry-sync",
        ),
    ]
    for page, start in enumerate(range(0, len(tasks), page_size)):
        infos = [
            TaskInfo(name=t.name, category=t.category, difficulty="medium", tags=["bench"], digest=t.digest)
            for t in tasks[start : start + page_size]
        ]
        events.append(
            _new(
                BenchmarkTasksSynced(benchmark_id=benchmark_id, sync_id=sync_id, page=page, tasks=infos),
                "registry-sync",
            )
        )
    events.append(
        _new(
            BenchmarkSyncCompleted(
                benchmark_id=benchmark_id,
                sync_id=sync_id,
                version="1.0",
                digest="sha256:" + "ab" * 32,
                task_count=len(tasks),
            ),
            "registry-sync",
        )
    )
    return benchmark_stream(benchmark_id), events


@dataclass
class _AgentTally:
    counts: dict[str, list[int]] = field(default_factory=dict)
    outcomes: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(("passed", "failed", "errored", "cancelled"), 0)
    )
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    duration_sum: float = 0.0
    duration_n: int = 0


@dataclass
class RunPlan:
    run_id: str
    name: str
    workspace_id: str
    benchmark_id: str
    tasks: list[BenchTask]
    agents: int
    attempts_per_task: int
    concurrency: int = 32
    retry_rate: float = 0.02
    error_rate: float = 0.01
    scored_every: int = 500  # provisional RunScored about every N finished attempts (scoring: ≤ 1/s)
    submitter: str = ADMIN_USER

    @property
    def attempts(self) -> int:
        return len(self.tasks) * self.agents * self.attempts_per_task


class RunLog:
    """The events of one run in the order its services append them; iterate to generate."""

    def __init__(self, plan: RunPlan, seed: int, validate_every: int = 1) -> None:
        self.plan = plan
        self.rng = random.Random(seed)
        self.validate_every = max(1, validate_every)
        self.skills = [self.rng.gauss(0.0, 1.0) for _ in range(plan.agents)]
        self.tallies = [_AgentTally() for _ in range(plan.agents)]
        self.leaderboard_scores: list[AgentScores] = []
        self._count = 0
        self._finished_template = AttemptFinished(
            run_id="r",
            attempt_id="a",
            agent_index=0,
            task="t",
            attempt_index=0,
            try_number=1,
            outcome="passed",
        ).model_dump(mode="json")

    @property
    def stream_id(self) -> str:
        return run_stream(self.plan.run_id)

    def _emit(self, type_name: str, data: dict[str, Any], actor: str) -> NewEvent:
        # Template-built payloads are checked against the models: every event or a regular sample.
        self._count += 1
        if self._count % self.validate_every == 0:
            assert parse_event(type_name, data).model_dump(mode="json") == data, type_name
        return NewEvent(str(uuid.uuid4()), type_name, data, {"actor": actor})

    def submitted(self) -> RunSubmitted:
        plan = self.plan
        agents = [
            AgentSpec(
                index=i,
                harness=["terminus-2", "claude-code", "codex", "openhands", "oracle"][i % 5],
                model=ModelSpec(type="provider", model=f"provider/model-{i}", api_key_secret="MODEL_KEY"),
            )
            for i in range(plan.agents)
        ]
        return RunSubmitted(
            run_id=plan.run_id,
            workspace_id=plan.workspace_id,
            name=plan.name,
            benchmark_id=plan.benchmark_id,
            benchmark_name=plan.benchmark_id,
            benchmark_version="1.0",
            benchmark_digest="sha256:" + "ab" * 32,
            selection=TaskSelection(),
            tasks=[RunTask(name=t.name, digest=t.digest, category=t.category) for t in plan.tasks],
            agents=agents,
            execution=ExecutionSettings(
                attempts_per_task=plan.attempts_per_task, max_concurrent_attempts=plan.concurrency
            ),
            secret_names=["MODEL_KEY"],
            config_toml=f'[experiment]\nbenchmark = "{plan.benchmark_id}"\n',
        )

    def __iter__(self) -> Iterator[NewEvent]:
        plan = self.plan
        run_id = plan.run_id
        yield _new(self.submitted(), plan.submitter)
        yield self._emit("RunQueued", {"run_id": run_id, "expected_attempts": plan.attempts}, SCHEDULER)
        order = [
            (agent, task, index)
            for index in range(plan.attempts_per_task)
            for task in plan.tasks
            for agent in range(plan.agents)
        ]
        ids = [attempt_id(run_id, agent, task.name, index) for agent, task, index in order]
        window = min(plan.concurrency, len(order))
        for i in range(window):
            yield self._scheduled(ids[i], *order[i])
        yield _new(RunStarted(run_id=run_id), SCHEDULER)
        for i, (agent, task, index) in enumerate(order):
            yield from self._attempt(ids[i], agent, task, index)
            if (i + 1) % plan.scored_every == 0:
                yield self._scored(final=False)
            if i + window < len(order):
                yield self._scheduled(ids[i + window], *order[i + window])
        yield _new(RunExecutionCompleted(run_id=run_id), SCHEDULER)
        yield self._scored(final=True)
        yield _new(RunFinished(run_id=run_id), SCORING)

    def _scheduled(self, aid: str, agent: int, task: BenchTask, index: int) -> NewEvent:
        data = {
            "run_id": self.plan.run_id,
            "attempt_id": aid,
            "agent_index": agent,
            "task": task.name,
            "attempt_index": index,
            "try_number": 1,
        }
        return self._emit("AttemptScheduled", data, SCHEDULER)

    def _attempt(self, aid: str, agent: int, task: BenchTask, index: int) -> Iterator[NewEvent]:
        rng = self.rng
        run_id = self.plan.run_id
        executor = f"executor-{rng.randrange(4) + 1}"
        try_number = 1
        yield self._emit(
            "AttemptStarted",
            {"run_id": run_id, "attempt_id": aid, "try_number": 1, "executor_id": executor},
            SCHEDULER,
        )
        if rng.random() < self.plan.retry_rate:
            try_number = 2
            yield self._emit(
                "AttemptRetried",
                {
                    "run_id": run_id,
                    "attempt_id": aid,
                    "try_number": 2,
                    "exception_type": "EnvironmentStartTimeoutError",
                    "exception_message": "sandbox did not start in 120 s",
                    "delay_seconds": 5.0,
                },
                SCHEDULER,
            )
            yield self._emit(
                "AttemptStarted",
                {"run_id": run_id, "attempt_id": aid, "try_number": 2, "executor_id": executor},
                SCHEDULER,
            )
        if rng.random() < self.plan.error_rate:
            outcome, reward = "errored", None
        else:
            p = 1.0 / (1.0 + math.exp(task.difficulty - self.skills[agent]))
            outcome = "passed" if rng.random() < p else "failed"
            reward = 1.0 if outcome == "passed" else 0.0
        total = round(rng.uniform(20.0, 600.0), 3)
        inputs, outputs = rng.randrange(2_000, 200_000), rng.randrange(200, 20_000)
        cost = round(inputs * 3e-6 + outputs * 15e-6, 6)
        data = dict(self._finished_template)
        data.update(
            run_id=run_id,
            attempt_id=aid,
            agent_index=agent,
            task=task.name,
            attempt_index=index,
            try_number=try_number,
            outcome=outcome,
            rewards=None if reward is None else {"reward": reward},
            primary_reward=reward,
            exception_type="AgentTimeoutError" if outcome == "errored" else None,
            exception_message="agent exceeded its timeout" if outcome == "errored" else None,
            started_at="2025-01-01T00:00:00Z",
            finished_at="2025-01-01T00:05:00Z",
            timings={
                "environment_setup": 2.5,
                "agent_setup": 4.0,
                "agent_execution": round(total - 10.0, 3),
                "verifier": 3.5,
                "total": total,
            },
            usage={"input_tokens": inputs, "output_tokens": outputs, "cache_tokens": 0, "cost_usd": cost},
            sandbox_seconds=total,
            executor_id=executor,
            artifacts=[
                {"path": "agent/trajectory.json", "digest": "sha256:" + uuid.uuid4().hex * 2, "size": 48_213}
            ],
        )
        tally = self.tallies[agent]
        tally.outcomes[outcome] += 1
        if outcome in ("passed", "failed"):
            n_c = tally.counts.setdefault(task.name, [0, 0])
            n_c[0] += 1
            n_c[1] += outcome == "passed"
        tally.input_tokens += inputs
        tally.output_tokens += outputs
        tally.cost_usd += cost
        tally.duration_sum += total
        tally.duration_n += 1
        yield self._emit("AttemptFinished", data, SCHEDULER)

    def _scored(self, *, final: bool) -> NewEvent:
        # Scoring's own statistics (imported lazily: only this generator needs the scoring package).
        from regatta_shared.statistics import pass_at_k, pass_at_k_curve, wilson

        agents = []
        n_tasks = len(self.plan.tasks)
        for index, tally in enumerate(self.tallies):
            scored = [(n, c) for n, c in tally.counts.values() if n > 0]
            one = pass_at_k(scored, 1) if scored else None
            curve = pass_at_k_curve(scored) if scored and len(scored) == n_tasks else []
            pass_k = []
            for k, value in curve:
                low, high = wilson(value, len(scored))
                pass_k.append({"k": k, "value": float(value), "ci_low": low, "ci_high": high})
            pass_1 = None
            if one is not None:
                low, high = wilson(one, len(scored))
                pass_1 = MetricValue(value=float(one), ci_low=low, ci_high=high, n=len(scored))
            tokens = tally.input_tokens + tally.output_tokens
            agents.append(
                AgentScores(
                    agent_index=index,
                    pass_at_1=pass_1,
                    pass_at_k=pass_k,
                    k=self.plan.attempts_per_task,
                    task_counts={task: list(n_c) for task, n_c in sorted(tally.counts.items())},
                    input_tokens=tally.input_tokens,
                    output_tokens=tally.output_tokens,
                    cost_usd=tally.cost_usd,
                    cost_per_task=tally.cost_usd / n_tasks,
                    mean_duration_seconds=tally.duration_sum / tally.duration_n if tally.duration_n else None,
                    tokens_per_task=tokens / n_tasks,
                    complete=final,
                    rank=index + 1,
                    **tally.outcomes,
                )
            )
        if final:
            self.leaderboard_scores = agents
        scored = RunScored(run_id=self.plan.run_id, final=final, agents=agents, rules_version=RULES_VERSION)
        return _new(scored, SCORING)


def leaderboard_event(benchmark_id: str, runs: Sequence[RunLog]) -> tuple[str, list[NewEvent]]:
    """One LeaderboardComputed over the final scores of `runs` (rows shaped as scoring's `_row`)."""
    rows = []
    for log in runs:
        submitted = log.submitted()
        for scores in log.leaderboard_scores:
            agent = submitted.agents[scores.agent_index]
            rows.append(
                {
                    "participant": f"{agent.participant}@{log.plan.run_id}",
                    "harness": agent.harness,
                    "model": agent.model.display_name,
                    "run_id": log.plan.run_id,
                    "run_name": log.plan.name,
                    "task_set": "all",
                    "version": "1.0",
                    "k": scores.k,
                    "pass_at_1": scores.pass_at_1.model_dump() if scores.pass_at_1 else None,
                    "pass_at_k": scores.pass_at_k,
                    "cost_per_task": scores.cost_per_task,
                    "mean_duration_seconds": scores.mean_duration_seconds,
                    "tokens_per_task": scores.tokens_per_task,
                    "ranks": {},
                }
            )
    rows.sort(key=lambda r: -(r["pass_at_1"] or {}).get("value", 0.0))
    for rank, row in enumerate(rows, start=1):
        for metric in ("pass_at_1", "pass_at_k", "cost_per_task", "time_per_task", "tokens_per_task"):
            row["ranks"][metric] = {"rank": rank, "tied": False, "comparison": None}
    return leaderboard_stream(benchmark_id), [
        _new(LeaderboardComputed(benchmark_id=benchmark_id, rows=rows), SCORING)
    ]


def interleave(
    logs: Sequence[RunLog], chunk: int, rng: random.Random
) -> Iterator[tuple[str, list[NewEvent]]]:
    """Runs progressing side by side: (stream, up to `chunk` consecutive events) pieces in random turns,
    as concurrent runs' appends interleave in the real log."""
    live = [(log.stream_id, iter(log)) for log in logs]
    while live:
        turn = rng.randrange(len(live))
        stream_id, events = live[turn]
        piece = [e for _, e in zip(range(chunk), events, strict=False)]
        if piece:
            yield stream_id, piece
        if len(piece) < chunk:
            live.pop(turn)
