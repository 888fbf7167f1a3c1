"""The page scripts take the run statuses that are final, and the sync statuses of a benchmark still
syncing, from the page the server rendered (app.js: Regatta.TERMINAL, Regatta.SYNCING), never from a list
of their own that could drift from regatta_shared.runs.status or regatta_shared.rules.benchmark_status."""

from __future__ import annotations

import re

from regatta_gateway.web.session import STATIC_DIR
from regatta_shared.rules.benchmark_status import IN_PROGRESS
from regatta_shared.runs.status import TERMINAL

from .conftest import ADMIN_TOKEN, Gateway

# An array literal listing two or more of the final statuses, e.g. ["finished", "failed", "stopped"].
FINAL = "|".join(TERMINAL)
OWN_LIST = re.compile(rf'\[\s*"(?:{FINAL})"\s*,\s*"(?:{FINAL})"')


def test_every_page_carries_the_final_statuses_and_no_script_lists_its_own(gateway: Gateway) -> None:
    gateway.client.cookies.set("regatta_token", ADMIN_TOKEN)
    try:
        for path in ("/benchmarks", "/secrets", "/signin"):
            response = gateway.client.get(path, follow_redirects=False)
            assert response.status_code == 200, (path, response.status_code)
            found = re.search(r'<body [^>]*data-terminal-statuses="([^"]*)"', response.text)
            assert found, path
            assert set(found.group(1).split()) == set(TERMINAL), path
            syncing = re.search(r'<body [^>]*data-syncing-statuses="([^"]*)"', response.text)
            assert syncing and tuple(syncing.group(1).split()) == IN_PROGRESS, path
    finally:
        gateway.client.cookies.clear()
    scripts = sorted(STATIC_DIR.glob("*.js"))
    assert scripts, STATIC_DIR
    assert [p.name for p in scripts if OWN_LIST.search(p.read_text())] == []
