"""The gateway's service layer on its own: a real store (SQLite or Postgres) with the gateway's read
models and secrets vault, the bootstrap admin in place, and no app, no HTTP and no NATS. Rule tests
(validation, conflicts, permissions) call `commands/` and `queries/` here as plain functions; what only
HTTP decides (status codes, headers, auth parsing, content types) stays in the app's tests."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from regatta_gateway.authentication import authenticate, resolve_scope
from regatta_gateway.commands import benchmarks as benchmark_commands
from regatta_gateway.commands import identity, workspace_handlers
from regatta_gateway.commands import runs as run_commands
from regatta_gateway.commands.bootstrap import bootstrap
from regatta_gateway.errors import Refused
from regatta_gateway.principals import Scope
from regatta_gateway.queries import benchmarks as benchmark_queries
from regatta_gateway.queries import leaderboards as leaderboard_queries
from regatta_gateway.queries import run_activity
from regatta_gateway.queries.run_detail import run_detail
from regatta_gateway.readmodels import ReadModels
from regatta_gateway.readmodels.operations import OpsReadModels
from regatta_gateway.secrets import store as secret_store
from regatta_gateway.secrets.keys import load_keys
from regatta_gateway.secrets.store import SecretVault
from regatta_shared.events import BenchmarkMetadata
from regatta_shared.eventstore import EventStore
from regatta_shared.eventstore.projections import ProjectionRunner
from regatta_shared.eventstore.schema import events as events_table
from regatta_shared.security.source_policy import SourcePolicy
from regatta_shared.settings import Settings
from sqlalchemy import func, select, text

from .conftest import ADMIN_TOKEN, make_settings, record_progress, record_sync


class Services:
    def __init__(self, database_url: str, data_dir: Path) -> None:
        # No NATS is reached: nothing here publishes (the relay is not part of the service layer).
        self.settings: Settings = make_settings(database_url, "nats://127.0.0.1:1", data_dir)
        self.store = EventStore(self.settings.resolved_database_url)
        self.store.create_schema()
        self.projections = ProjectionRunner(self.store, ReadModels())
        self.projections.create_tables()
        # The budgets a submission is checked against live in the ops projection.
        self.ops_projections = ProjectionRunner(self.store, OpsReadModels())
        self.ops_projections.create_tables()
        keys = load_keys(self.settings)
        self.vault = SecretVault(self.store, keys.secrets_at_rest, keys.sealing)
        self.vault.create_tables()
        bootstrap(self.store, self.settings)
        self.settle()

    def close(self) -> None:
        self.store.dispose()

    def settle(self) -> None:
        self.projections.catch_up()
        self.ops_projections.catch_up()

    # --- who acts ---------------------------------------------------------------------------------

    def scope(self, token: str = ADMIN_TOKEN, workspace: str | None = "default") -> Scope:
        return resolve_scope(self.store, authenticate(self.store, f"Bearer {token}"), workspace)

    def user_id(self, token: str) -> str:
        return authenticate(self.store, f"Bearer {token}").user_id

    def workspace(self, name: str) -> str:
        created = workspace_handlers.create_workspace(self.store, self.settings, self.scope(), {"name": name})
        self.settle()
        return created["id"]

    def member(self, workspace: str, email: str, role: str = "member") -> str:
        body = {"email": email, "role": role, "issue_token": True}
        token = identity.add_member(self.store, self.scope(workspace=workspace), body)["token"]
        self.settle()
        return token

    # --- what they add ----------------------------------------------------------------------------

    def benchmark(
        self,
        name: str,
        tasks: list[str],
        *,
        workspace: str = "default",
        token: str = ADMIN_TOKEN,
        ready: bool = True,
        categories: dict[str, str] | None = None,
        metadata: BenchmarkMetadata | None = None,
    ) -> str:
        body = {"source_type": "folder", "path": f"/srv/benchmarks/{name}", "name": name}
        policy = SourcePolicy.from_settings(self.settings)
        benchmark_id = benchmark_commands.add_benchmark(
            self.store, self.scope(token, workspace), body, policy
        )
        if ready:
            record_sync(self.store, benchmark_id, name, tasks, categories=categories, metadata=metadata)
        self.settle()
        return benchmark_id

    def submit(self, config: dict[str, Any], scope: Scope | None = None) -> dict[str, Any]:
        parsed = run_commands.parse_submission(json.dumps(config).encode(), "application/json")
        created = run_commands.submit_run(self.store, scope or self.scope(), parsed, self.vault)
        self.settle()
        return created

    def progress(self, run_id: str, **what: Any) -> None:
        """conftest.record_progress (attempts, their evidence, scores), then the read models catch up."""
        record_progress(self.store, run_id, **what)
        self.settle()

    def set_secret(self, name: str, value: str, kind: str, scope: Scope | None = None) -> str:
        secret_id = secret_store.set_secret(self.vault, scope or self.scope(), name, value, kind)
        self.settle()
        return secret_id

    # --- what the queries answer -------------------------------------------------------------------

    def run(self, run_id: str, scope: Scope | None = None) -> dict[str, Any]:
        """What GET /api/v1/runs/{key} answers (the route serialises this dict as it is)."""
        return run_detail(self.store, scope or self.scope(), run_id, self.settings.gateway_url)

    def leaderboard(self, benchmark: str, sort: str = "pass_at_1") -> dict[str, Any]:
        """What GET /api/v1/benchmarks/{key}/leaderboard answers (the query makes its JSON bytes)."""
        found = benchmark_queries.find_benchmark(self.store, self.scope(), benchmark)
        return json.loads(leaderboard_queries.leaderboard_body(self.store, found["id"], sort))

    def attempts(self, run_id: str, **filters: Any) -> dict[str, Any]:
        """What GET /api/v1/runs/{key}/attempts answers, with its query parameters as `filters`."""
        return run_activity.attempts_page(self.store, self.scope(), run_id, **filters)

    # --- what was recorded ------------------------------------------------------------------------

    def event_count(self) -> int:
        with self.store.read_engine.connect() as conn:
            return conn.execute(select(func.count()).select_from(events_table)).scalar_one()

    def all_event_json(self) -> str:
        with self.store.read_engine.connect() as conn:
            rows = conn.execute(select(events_table.c.data, events_table.c.metadata)).all()
        return json.dumps([[r[0], r[1]] for r in rows])

    def raw_rows(self, table: str) -> list[dict[str, Any]]:
        with self.store.read_engine.connect() as conn:
            return [dict(r) for r in conn.execute(text(f"SELECT * FROM {table}")).mappings()]


def refused(call: Callable[[], Any], kind: type[Refused], code: str | None = None) -> Refused:
    """`call` refuses with `kind` (http/errors.py maps each kind to its status), a message, and `code`."""
    with pytest.raises(kind) as raised:
        call()
    assert isinstance(raised.value.message, str) and raised.value.message
    if code:
        assert raised.value.code == code, raised.value.code
    return raised.value
