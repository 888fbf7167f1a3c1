"""A test whose service is missing fails unless a developer opts in to skipping, and always fails in CI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NEEDS_A_SERVICE = """
from tests.conftest import unavailable


def test_needs_a_missing_service():
    unavailable("the frobnicator is not installed")
"""


@pytest.mark.parametrize(
    ("env", "code", "outcome"),
    [
        ({}, 1, "1 failed"),
        ({"REGATTA_TEST_ALLOW_SKIP": "1"}, 0, "1 skipped"),
        ({"REGATTA_TEST_ALLOW_SKIP": "1", "CI": "true"}, 1, "1 failed"),
    ],
)
def test_a_missing_service_fails_unless_skipping_is_asked_for(
    tmp_path: Path, env: dict[str, str], code: int, outcome: str
) -> None:
    module = tmp_path / "test_needs_service.py"
    module.write_text(NEEDS_A_SERVICE)
    base = {k: v for k, v in os.environ.items() if k not in ("CI", "REGATTA_TEST_ALLOW_SKIP")}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "--rootdir",
            str(tmp_path),
            str(module),
        ],
        # The policy lives in tests/conftest.py alone; loading every installed plugin (playwright,
        # schemathesis, hypothesis...) would only add seconds to each run.
        env={**base, **env, "PYTHONPATH": str(ROOT), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == code, result.stdout + result.stderr
    assert outcome in result.stdout
    if code:
        assert "the frobnicator is not installed" in result.stdout
