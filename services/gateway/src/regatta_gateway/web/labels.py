"""How pages word things: agent labels (`harness · model`), a run's task selection, plurals, links and
query strings. Shared by the benchmark, leaderboard and run pages so they name things alike."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlencode

from regatta_shared.rules import participants

from regatta_gateway.web.formatting import parse_time


def is_url(value: Any) -> bool:
    return isinstance(value, str) and bool(re.match(r"^https?://", value))


def page_query(current: dict[str, str], **changes: Any) -> str:
    """`?a=1&b=2`: the page's own query string (fragment requests aside) with `changes`, empty values
    dropped, so pager and filter links keep the sort and the other filters."""
    merged = {k: v for k, v in current.items() if k != "fragment"}
    merged.update({k: str(v) for k, v in changes.items()})
    return "?" + urlencode({k: v for k, v in merged.items() if v not in ("", None)})


def plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def selection_text(selection: dict[str, Any]) -> str:
    """A run's task selection in words, as the runs list shows it."""
    count = plural(int(selection.get("task_count") or 0), "task")
    kind = selection.get("kind")
    if kind == "task_set":
        return f"Set {selection.get('task_set')} · {count}"
    if kind == "categories":
        categories = selection.get("categories") or []
        word = "Category" if len(categories) == 1 else "Categories"
        return f"{word} {', '.join(categories)} · {count}"
    if kind == "task_names":
        names = selection.get("task_names") or []
        more = int(selection.get("task_name_count") or len(names)) - len(names)
        return f"Named: {', '.join(names)}{f' and {more} more' if more > 0 else ''} · {count}"
    return f"All · {count}"


def agent_label(agent: dict[str, Any]) -> str:
    """An agent of a submission (AgentSpec as stored), labelled as everywhere else (`label`)."""
    return label(agent.get("harness"), model_name(agent.get("model")))


def model_name(model: Any) -> str:
    """The name a stored model spec gives (regatta_shared.rules.participants.spec_model_name), or the name
    given."""
    return participants.spec_model_name(model) if isinstance(model, dict) else str(model or "")


def label(harness: Any, model: Any) -> str:
    """The one way every page names an agent: its identity's display name (regatta_shared.rules.participants),
    `harness · model`, or the harness alone for one that calls no model."""
    return participants.agent_label(str(harness or "default"), str(model or ""))


def newest_first(values: list[str | None]) -> str | None:
    parsed = [(parse_time(v), v) for v in values if v]
    return max(parsed)[1] if parsed else None
