"""What the task page shows: the task (metadata, validity, its files by section, the instruction rendered as
sanitised HTML), its results by agent, and one page of its history across the workspace's runs.

A task no longer in the benchmark's ready version but attempted by earlier runs still has a page: its
history, without files.
"""

from __future__ import annotations

import asyncio
from typing import Any

from regatta_shared.eventstore import EventStore
from regatta_shared.rules.ceilings import TaskFileBounds

from regatta_gateway.errors import NotFound
from regatta_gateway.principals import Scope
from regatta_gateway.queries.task_browser import Fetch, task_detail
from regatta_gateway.queries.task_files import SHOWN_BYTES, TOTAL_SHOWN_BYTES
from regatta_gateway.queries.task_history import task_history
from regatta_gateway.web.task_markdown import instruction_html

HISTORY_PAGE = 50
SECTIONS = (
    ("config", "task.toml"),
    ("environment", "Environment"),
    ("tests", "Tests"),
    ("solution", "Solution"),
    ("other", "Other files"),
)


async def task_page(
    store: EventStore, fetch: Fetch, bounds: TaskFileBounds, scope: Scope, key: str, name: str, page: int
) -> dict[str, Any]:
    offset = (page - 1) * HISTORY_PAGE
    history = await asyncio.to_thread(task_history, store, scope, key, name, HISTORY_PAGE, offset)
    try:
        detail: dict[str, Any] | None = await task_detail(store, fetch, bounds, scope, key, name)
    except NotFound:
        detail = None
    sections = []
    if detail is not None:
        for section, title in SECTIONS:
            files = [f for f in detail["files"] if f["section"] == section]
            hidden = section == "solution" and detail["solutions_hidden"]
            if files or hidden:
                sections.append({"id": section, "title": title, "files": files, "hidden": hidden})
    instruction = detail and detail["instruction"]
    return {
        "history": history,
        "detail": detail,
        "sections": sections,
        "instruction_html": instruction_html(instruction) if instruction else None,
        "shown_kib": SHOWN_BYTES // 1024,
        "total_shown_mib": TOTAL_SHOWN_BYTES // (1024 * 1024),
        "page": page,
        "per_page": HISTORY_PAGE,
    }
