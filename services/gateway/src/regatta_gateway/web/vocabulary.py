"""The status words the templates and page scripts test, as the kernel defines them: never a list of the
pages' own (tests/unit/test_vocabularies.py). Template globals (web/routes.py)."""

from __future__ import annotations

from typing import Any

from regatta_shared.rules.benchmark_status import IN_PROGRESS
from regatta_shared.rules.outcomes import OUTCOMES
from regatta_shared.runs.status import ENDED_EARLY, NOT_STARTED, TERMINAL

from regatta_gateway.web.benchmark_views import is_syncing

TEMPLATE_GLOBALS: dict[str, Any] = {
    "outcomes": OUTCOMES,
    "is_syncing": is_syncing,
    "run_not_started": NOT_STARTED,
    "run_ended_early": ENDED_EARLY,
    "run_terminal": TERMINAL,
    # The page scripts read them from the page's body (app.js: Regatta.TERMINAL, Regatta.SYNCING).
    "terminal_statuses": " ".join(sorted(TERMINAL)),
    "syncing_statuses": " ".join(IN_PROGRESS),
}
