"""The pure kernel stays pure: the run aggregate and the score tally load no database library, so they
can be reasoned about and tested as plain functions (a fresh interpreter, since this one has loaded it)."""

from __future__ import annotations

import subprocess
import sys

PURE = [
    "regatta_run_scheduler.run",
    "regatta_run_scheduler.run_state",
    "regatta_scoring.scores",
    "regatta_gateway.commands.benchmark_decider",
    "regatta_shared.events.envelope",
    "regatta_shared.events.codec",
    "regatta_shared.events.aggregates",
]


def test_pure_modules_import_without_sqlalchemy() -> None:
    imports = ", ".join(PURE)
    check = f"import {imports}, sys; assert 'sqlalchemy' not in sys.modules, 'sqlalchemy was imported'"
    result = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
