"""The compare page: the API's comparison, filtered by verdict and category for the table only (the
summary always covers every task both participants scored, whatever the filter shows)."""

from __future__ import annotations

from typing import Any

from regatta_shared.eventstore import EventStore

from regatta_gateway.principals import Scope
from regatta_gateway.queries import compare as compare_queries

VERDICT_FILTERS = {
    "": "Any change",
    "changed": "Improved or regressed",
    "improved": "Improved",
    "regressed": "Regressed",
    "same": "Same",
    "unscored": "Unscored",
}


def compare_page(
    store: EventStore, scope: Scope, a: str, b: str, verdict: str, category: str
) -> dict[str, Any]:
    result = compare_queries.compare(
        store,
        scope,
        compare_queries.parse_participant(a[: compare_queries.PARTICIPANT_MAX + 1], "a"),
        compare_queries.parse_participant(b[: compare_queries.PARTICIPANT_MAX + 1], "b"),
    )
    rows = result["tasks"]
    categories = sorted({row["category"] for row in rows if row["category"]})
    verdict = verdict if verdict in VERDICT_FILTERS else ""
    category = category if category in categories else ""
    shown = [
        row
        for row in rows
        if (
            not verdict
            or row["verdict"] == verdict
            or (verdict == "changed" and row["verdict"] in ("improved", "regressed"))
        )
        and (not category or row["category"] == category)
    ]
    return {
        **result,
        "shown": shown,
        "categories": categories,
        "verdict": verdict,
        "category": category,
        "verdict_filters": VERDICT_FILTERS,
        "a_key": a,
        "b_key": b,
    }
