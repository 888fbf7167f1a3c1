"""The compare page: the API's comparison, filtered by verdict and category for the table only (the
summary always covers every task both participants scored, whatever the filter shows); the pair picked by
ticking two rows; and one task of it side by side."""

from __future__ import annotations

from typing import Any

from regatta_shared.eventstore import EventStore
from regatta_shared.participants import agent_label, stored_agent_model
from starlette.concurrency import run_in_threadpool

from regatta_gateway.errors import Invalid
from regatta_gateway.principals import Scope
from regatta_gateway.queries import compare as compare_queries
from regatta_gateway.queries import compare_task
from regatta_gateway.queries.benchmarks import find_run
from regatta_gateway.queries.grading import Fetch, attempt_grading
from regatta_gateway.queries.run_rows import run_submissions
from regatta_gateway.queries.transcripts import transcript
from regatta_gateway.readmodels import tables as t

_RUN = (t.runs.c.id, t.runs.c.seq)

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
        "agent_choices": agent_choices(store, sorted({result["a"]["run_id"], result["b"]["run_id"]})),
    }


def picked(store: EventStore, scope: Scope, runs: list[str], participants: list[str]) -> tuple[str, str]:
    """The `a` and `b` of a comparison picked by ticking two rows: two runs of the runs table (`run`,
    each's first agent, the older run as A) or two leaderboard rows (`p`, RUN:AGENT_INDEX, in order)."""
    if runs:
        if len(runs) != 2 or runs[0] == runs[1]:
            raise Invalid("Select exactly two runs to compare", code="VALIDATION", field="run")
        found = [find_run(store, scope, key[: compare_queries.PARTICIPANT_MAX], _RUN) for key in runs]
        older, newer = sorted(found, key=lambda row: row["seq"] or 0)
        return f"{older['id']}:0", f"{newer['id']}:0"
    if len(participants) != 2 or participants[0] == participants[1]:
        raise Invalid("Select exactly two rows to compare", code="VALIDATION", field="p")
    for value in participants:
        compare_queries.parse_participant(value[: compare_queries.PARTICIPANT_MAX + 1], "p")
    return participants[0], participants[1]


def agent_choices(store: EventStore, run_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Each run's agents as the compare page's pickers offer them (counted from 1, as people do)."""
    submissions = run_submissions(store, run_ids)
    choices: dict[str, list[dict[str, Any]]] = {}
    for run_id in run_ids:
        agents = (submissions.get(run_id) or {}).get("agents") or []
        choices[run_id] = [
            {
                "value": f"{run_id}:{agent['index']}",
                "text": f"Agent {agent['index'] + 1}: "
                + agent_label(agent.get("harness", ""), stored_agent_model(agent)),
            }
            for agent in agents
        ]
    return choices


async def task_page(
    store: EventStore, fetch: Fetch, scope: Scope, a: str, b: str, task: str, chosen: dict[str, str]
) -> dict[str, Any]:
    """The side-by-side view of one task: both sides' attempts, and the chosen attempt of each with its
    grading (the attempt page's) and transcript."""
    page = await run_in_threadpool(
        compare_task.task_sides,
        store,
        scope,
        compare_queries.parse_participant(a[: compare_queries.PARTICIPANT_MAX + 1], "a"),
        compare_queries.parse_participant(b[: compare_queries.PARTICIPANT_MAX + 1], "b"),
        task,
        chosen,
    )
    for name in ("a", "b"):
        side = page[name]
        attempt = side["chosen"]
        side["grading"] = (
            await attempt_grading(fetch, attempt, side["primary_key"])
            if attempt and attempt["outcome"]
            else None
        )
        side["transcript"] = await transcript(fetch, attempt) if attempt else None
    return {**page, "a_key": a, "b_key": b}
