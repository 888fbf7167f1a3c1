"""Labels on a run's attempts, read from the rm_attempt_labels read model."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from regatta_shared.eventstore import EventStore
from sqlalchemy import select

from regatta_gateway.readmodels import tables as t

_COLUMNS = ("label_id", "attempt_id", "label", "note", "by_user", "by_name", "at")


def run_labels(store: EventStore, run_id: str, attempt_ids: Iterable[str] | None = None) -> dict[str, list]:
    """{attempt_id: [label, ...]} in the order they were put on, for the run (or only `attempt_ids`)."""
    query = select(*(t.attempt_labels.c[c] for c in _COLUMNS)).where(t.attempt_labels.c.run_id == run_id)
    if attempt_ids is not None:
        query = query.where(t.attempt_labels.c.attempt_id.in_(list(attempt_ids)))
    with store.read_engine.connect() as conn:
        rows = conn.execute(query.order_by(t.attempt_labels.c.position)).mappings().all()
    labels: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        labels[row["attempt_id"]].append(_public(row))
    return dict(labels)


def _public(row: Any) -> dict[str, Any]:
    return {
        "id": row["label_id"],
        "label": row["label"],
        "note": row["note"] or "",
        "by": row["by_name"] or row["by_user"],
        "at": row["at"],
    }


def attempt_of_run(store: EventStore, run_id: str, attempt_id: str) -> bool:
    query = select(t.attempts.c.attempt_id).where(
        t.attempts.c.run_id == run_id, t.attempts.c.attempt_id == attempt_id
    )
    with store.read_engine.connect() as conn:
        return conn.execute(query).first() is not None
