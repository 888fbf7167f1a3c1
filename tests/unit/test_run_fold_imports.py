"""The run fold is kernel code: importing it loads no database or messaging library."""

from __future__ import annotations

import subprocess
import sys


def test_the_run_fold_imports_no_sqlalchemy_or_faststream() -> None:
    code = (
        "import sys, regatta_shared.runs\n"
        "loaded = [m for m in ('sqlalchemy', 'faststream', 'nats') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
