"""Read-model tables of the gateway. Each row is a deterministic function of events (invariant 7)."""

from __future__ import annotations

from sqlalchemy import JSON, BigInteger, Boolean, Column, Float, Index, Integer, MetaData, String, Table, Text
from sqlalchemy.dialects.postgresql import JSONB

metadata = MetaData()
Json = JSON().with_variant(JSONB(), "postgresql")

workspaces = Table(
    "rm_workspaces",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("name", String(200), unique=True),
)
users = Table(
    "rm_users",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("email", String(300)),
    Column("name", String(300)),
)
members = Table(
    "rm_members",
    metadata,
    Column("workspace_id", String(64), primary_key=True),
    Column("user_id", String(64), primary_key=True),
    Column("role", String(20)),
    # Log position of the user's MemberAdded: their first workspace is their default one.
    Column("joined", BigInteger),
)
platform_admins = Table(
    "rm_platform_admins",
    metadata,
    Column("user_id", String(64), primary_key=True),
)
tokens = Table(
    "rm_tokens",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("user_id", String(64), nullable=False),
    Column("token_hash", String(128), nullable=False, unique=True),
    Column("name", String(200)),
    Column("expires_at", String(40)),
    Column("revoked", Boolean, default=False),
    Column("created_at", String(40)),
)
benchmarks = Table(
    "rm_benchmarks",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("workspace_id", String(64), nullable=False, index=True),
    Column("name", String(300)),
    Column("source_type", String(20)),
    Column("source_ref", String(1000)),
    Column("source", Json),
    Column("hosted", Boolean),
    Column("status", String(20)),
    Column("sync_id", String(64)),
    Column("synced", Integer, default=0),
    Column("total", Integer, default=0),
    Column("ready_sync_id", String(64)),
    Column("task_count", Integer),
    Column("version", String(100)),
    Column("digest", String(100)),
    Column("sync_error", Text),
    Column("metadata", Json),
    Column("added_at", String(40)),
    Column("added_by", String(300)),
    # The adder's user id (added_by is their name, for display): who may remove it besides an admin.
    Column("added_by_id", String(200)),
    Column("removed", Boolean, default=False),
)
# A benchmark looked up by its key in a workspace (queries.benchmarks.find_benchmark). Added with the
# `name@latest` keys (benchmark_keys.py): the new schema rebuilds the table, so every key is written alike.
Index("ix_rm_benchmarks_key", benchmarks.c.workspace_id, benchmarks.c.source_ref)
benchmark_tasks = Table(
    "rm_benchmark_tasks",
    metadata,
    Column("benchmark_id", String(64), primary_key=True),
    Column("sync_id", String(64), primary_key=True),
    Column("name", String(500), primary_key=True),
    Column("ordinal", Integer),
    Column("category", String(200)),
    Column("difficulty", String(20)),
    Column("tags", Json),
    Column("digest", String(100)),
    # What the task asks for (TaskResources), checked against the ceilings again at run submission.
    Column("resources", Json),
    # Set for a task that cannot run: listed with its reason, never selected for a run.
    Column("invalid_reason", Text),
)
# Tasks a workspace admin took out of a benchmark version (BenchmarkTaskExcluded), with why.
benchmark_exclusions = Table(
    "rm_benchmark_exclusions",
    metadata,
    Column("benchmark_id", String(64), primary_key=True),
    Column("version", String(200), primary_key=True),
    Column("task", String(500), primary_key=True),
    Column("reason", Text),
    Column("excluded_by", String(300)),
    Column("excluded_at", String(40)),
)
runs = Table(
    "rm_runs",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("workspace_id", String(64), nullable=False, index=True),
    Column("benchmark_id", String(64), index=True),
    Column("name", String(300), index=True),
    Column("status", String(20)),
    Column("created_at", String(40)),
    Column("started_at", String(40)),
    Column("completed_at", String(40)),
    Column("created_by", String(300)),
    Column("creator_email", String(300)),
    Column("expected", Integer, default=0),
    Column("ingested", Integer, default=0),
    Column("seq", BigInteger),
    Column("submission", Json),
    Column("scores", Json),
    Column("scores_final", Boolean, default=False),
    Column("stop_requested", Boolean, default=False),
    Column("reason", Text),
    Column("input_tokens", BigInteger, default=0),
    Column("output_tokens", BigInteger, default=0),
    Column("cost_usd", Float),
    # Finished attempts by the environment that ran them: {name: {"attempts": n, "not_built": m}}, where
    # not_built counts those whose task's own environment (Dockerfile, image) was not built.
    Column("environments", Json),
)
attempts = Table(
    "rm_attempts",
    metadata,
    Column("attempt_id", String(64), primary_key=True),
    Column("run_id", String(64), nullable=False),
    Column("agent_index", Integer),
    Column("task", String(500)),
    Column("attempt_index", Integer),
    Column("status", String(20)),
    Column("outcome", String(20)),
    Column("try_number", Integer),
    Column("scheduled_at", String(40)),
    Column("started_at", String(40)),
    Column("finished_at", String(40)),
    Column("result", Json),
    # What the platform saw before the verifier ran (regatta_shared.runs.integrity): None when the
    # attempt's environment does not look; counts None when it could not.
    Column("integrity_checked", Boolean),
    Column("integrity_unexplained", Integer),
    Column("integrity_processes", Integer),
    Column("integrity_writes", Integer),
)
# The run page's order (run_activity.list_attempts): a page of a 100k-attempt run is an index range scan,
# not a sort of the whole run. Also serves every other per-run attempt query by its run_id prefix.
Index(
    "ix_rm_attempts_run_order",
    attempts.c.run_id,
    attempts.c.task,
    attempts.c.agent_index,
    attempts.c.attempt_index,
)
# A run's totals count its attempts by outcome (run_detail._totals): an index-only scan.
Index("ix_rm_attempts_run_outcome", attempts.c.run_id, attempts.c.outcome)
# Labels members put on attempts (AttemptLabelled/AttemptLabelRemoved); a removed label's row is deleted.
attempt_labels = Table(
    "rm_attempt_labels",
    metadata,
    Column("label_id", String(64), primary_key=True),
    Column("run_id", String(64), nullable=False),
    Column("attempt_id", String(64), nullable=False),
    Column("label", String(40)),
    Column("note", Text),
    Column("by_user", String(64)),
    Column("by_name", String(300)),
    Column("at", String(40)),
    Column("position", BigInteger),
)
Index("ix_rm_attempt_labels_run", attempt_labels.c.run_id, attempt_labels.c.attempt_id)
run_logs = Table(
    "rm_run_logs",
    metadata,
    Column("run_id", String(64), primary_key=True),
    Column("position", BigInteger, primary_key=True),
    Column("timestamp", String(40)),
    Column("level", String(10)),
    Column("step", String(60)),
    Column("message", Text),
    Column("details", Json),
)
leaderboards = Table(
    "rm_leaderboards",
    metadata,
    Column("benchmark_id", String(64), primary_key=True),
    Column("rows", Json),
    Column("position", BigInteger),  # of the LeaderboardComputed: the rows' version (cached_reads.py)
)
secrets = Table(
    "rm_secrets",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("workspace_id", String(64), nullable=False, index=True),
    Column("name", String(255)),
    Column("scope", String(20)),
    Column("owner_user_id", String(64)),
    Column("created_at", String(40)),
    Column("updated_at", String(40)),
    Column("creator_name", String(300)),
    Column("updater_name", String(300)),
)
