"""What the benchmark pages show: the benchmarks list, a benchmark's stored source, one page of its runs
with the filters and pager the runs table needs, and one page of its tasks. Reads the query functions
`/api/v1` uses."""

from __future__ import annotations

from typing import Any

from regatta_shared.eventstore import EventStore
from regatta_shared.rules.benchmark_status import IN_PROGRESS
from regatta_shared.runs.status import RUN_STATUSES
from sqlalchemy import select

from regatta_gateway.commands import benchmark_decider
from regatta_gateway.principals import Scope
from regatta_gateway.queries import benchmarks as benchmark_queries
from regatta_gateway.queries import runs as run_queries
from regatta_gateway.queries import task_browser
from regatta_gateway.readmodels import tables as t
from regatta_gateway.web.labels import agent_label, selection_text


def benchmark_rows(store: EventStore, scope: Scope) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    offset = 0
    while True:  # pages of 200, the API's maximum, so a big workspace still lists everything
        page = benchmark_queries.list_benchmarks(store, scope, 200, offset)
        rows += page["benchmarks"]
        if not page["has_more"]:
            return rows
        offset = page["next_offset"]


def is_syncing(benchmark: dict[str, Any]) -> bool:
    """Whether the benchmark's task list is still being synced (the rows show progress, no count)."""
    return benchmark.get("sync_status") in IN_PROGRESS


def benchmark_source(store: EventStore, scope: Scope, key: str) -> dict[str, Any]:
    """The stored source of a benchmark (registry path, dataset, version or folder) for "View source"."""
    row = benchmark_queries.find_benchmark(store, scope, key)
    source = dict(row.get("source") or {})
    source.setdefault("type", row["source_type"])
    source.setdefault("ref", row["source_ref"])
    return source_facts(source)


# The stored flag (`trusted: true`) said as the page says it.
TRUSTED = "trusted: added by a platform administrator or the deployment (its host paths may lie anywhere)"


def source_facts(source: dict[str, Any]) -> dict[str, str]:
    """A stored source as "View source" lists it: each set field as text a person reads (a flag as a
    word, metadata as `key: value` pairs), never a Python value's repr; unset fields left out."""
    facts: dict[str, str] = {}
    for key, value in source.items():
        if key == "trusted":
            if value is True:
                facts["trust"] = TRUSTED
        elif value not in (None, "", [], {}):
            facts[key] = _text(value)
    return facts


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(_text(v) for v in value)
    if isinstance(value, dict):
        return "; ".join(f"{k}: {_text(v)}" for k, v in value.items() if v not in (None, "", [], {}))
    return str(value)


def may_remove(store: EventStore, scope: Scope, key: str) -> bool:
    """Whether the page offers Remove: by the rule the remove command decides by, so the menu offers it
    exactly to those whose removal would be recorded."""
    row = benchmark_queries.find_benchmark(store, scope, key)
    return not row["hosted"] and benchmark_decider.may_remove(
        row["added_by_id"], scope.principal.user_id, scope.is_admin
    )


RUNS_PAGE = 50


def runs_of(
    store: EventStore,
    scope: Scope,
    benchmark_id: str,
    base_url: str,
    *,
    page: int = 1,
    status: str | None = None,
    submitter: str | None = None,
) -> dict[str, Any]:
    """One page of the benchmark's runs (newest first) with the filters applied, and what the pager
    and the filter form need."""
    status = status if status in RUN_STATUSES else None
    page = max(1, page)
    listed = run_queries.list_runs(
        store,
        scope,
        RUNS_PAGE,
        (page - 1) * RUNS_PAGE,
        benchmark_id,
        base_url,
        status=status,
        submitter=submitter or None,
    )
    runs = listed["benchmark_runs"]
    agents = _agent_names(store, [r["id"] for r in runs])
    for run in runs:
        run["agent_names"] = agents.get(run["id"], [])
        run["selection_text"] = selection_text(run["task_selection"])
    total = listed["total_count"]
    first = (page - 1) * RUNS_PAGE + 1
    return {
        "rows": runs,
        "total": total,
        "page": page,
        "pages": max(1, -(-total // RUNS_PAGE)),
        "first": first if runs else 0,
        "last": first + len(runs) - 1 if runs else 0,
        "status": status or "",
        "submitter": submitter or "",
        "statuses": RUN_STATUSES,
        "submitters": run_queries.run_submitters(store, scope, benchmark_id),
    }


def _agent_names(store: EventStore, run_ids: list[str]) -> dict[str, list[str]]:
    if not run_ids:
        return {}
    with store.read_engine.connect() as conn:
        rows = conn.execute(select(t.runs.c.id, t.runs.c.submission).where(t.runs.c.id.in_(run_ids))).all()
    return {run_id: [agent_label(a) for a in (sub or {}).get("agents") or []] for run_id, sub in rows}


TASK_PAGE = 50


def task_list(store: EventStore, scope: Scope, benchmark_id: str, search: str, page: int) -> dict[str, Any]:
    """The benchmark page's task list: one page of it, searched, with the page number for its pager."""
    listed = task_browser.task_list(store, scope, benchmark_id, search, TASK_PAGE, (page - 1) * TASK_PAGE)
    return {**listed, "page": page, "pages": max(1, -(-listed["total_count"] // TASK_PAGE))}
