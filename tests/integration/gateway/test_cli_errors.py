"""The `regatta` CLI's failures (issue 38), the real CLI in a subprocess against the real gateway: with
`--json` every failure (the API's refusal, bad input, no connection) is one JSON error on stderr with a
non-zero exit, stdout empty; without it, the message is said once."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.tasks import run_toml

from .cli_support import regatta, served
from .conftest import Gateway


@pytest.fixture
def url(gateway: Gateway) -> Iterator[str]:
    with served(gateway) as address:
        yield address


def json_error(result, exit_code: int = 1) -> dict:
    assert result.returncode == exit_code, result.stdout + result.stderr
    assert result.stdout == "", result.stdout
    return json.loads(result.stderr)["error"]


def test_with_json_every_failure_is_one_json_error(gateway: Gateway, url: str, tmp_path: Path) -> None:
    gateway.benchmark("demo", ["t1", "t2"])

    # A refusal of the API: its code, message, field and status.
    missing = json_error(regatta(url, "run", "show", "no-such-run", "--json"))
    assert missing == {
        "code": "NOT_FOUND",
        "message": "Benchmark run 'no-such-run' not found",
        "field": None,
        "status": 404,
    }
    config = tmp_path / "run.toml"
    config.write_text(run_toml("demo", agents=("no-such-harness",)))
    invalid = json_error(regatta(url, "run", "submit", str(config), "--json"))
    assert (invalid["code"], invalid["field"], invalid["status"]) == ("VALIDATION", "agents.0.harness", 400)
    assert invalid["issues"] == [{"key": "agents.0.harness", "message": "unknown harness 'no-such-harness'"}]

    # Bad input refused by the CLI itself: the parameter is named, exit 2 as for any usage error.
    unreadable = json_error(regatta(url, "run", "submit", str(tmp_path / "absent.toml"), "--json"), 2)
    assert (unreadable["code"], unreadable["field"]) == ("VALIDATION", "FILE")
    assert "absent.toml" in unreadable["message"]
    unknown = json_error(regatta(url, "run", "list", "--no-such-option", "--json"), 2)
    assert (unknown["code"], unknown["field"]) == ("USAGE", "--no-such-option")

    # No gateway at the URL.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    unreachable = json_error(regatta(closed, "benchmark", "list", "--json"))
    assert unreachable["code"] == "CONNECTION_FAILED" and closed in unreachable["message"]

    # Without --json the same refusal is a line of text.
    text = regatta(url, "run", "show", "no-such-run")
    assert text.returncode == 1 and text.stdout == "Error: Benchmark run 'no-such-run' not found\n"


def test_an_unknown_harness_is_said_once(gateway: Gateway, url: str, tmp_path: Path) -> None:
    gateway.benchmark("demo", ["t1", "t2"])
    config = tmp_path / "run.toml"
    config.write_text(run_toml("demo", agents=("oracle", "no-such-harness", "also-unknown")))
    refused = regatta(url, "run", "submit", str(config))
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert refused.stdout.count("unknown harness 'no-such-harness'") == 1, refused.stdout
    # The other issue, not in the message, is still listed.
    assert "  - agents.2.harness: unknown harness 'also-unknown'" in refused.stdout


def test_a_folder_outside_the_source_roots_is_refused_naming_them(
    gateway: Gateway, url: str, tmp_path: Path
) -> None:
    member = gateway.member("default", "member@example.com")  # not a platform administrator
    before = gateway.event_count()
    refused = regatta(url, "benchmark", "add", str(tmp_path), "--folder", token=member)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    said = " ".join(refused.stdout.split())
    assert "path: outside the allowed roots: REGATTA_SOURCE_ROOTS=/srv/benchmarks;" in said, said
    assert "ask a platform administrator" in said, said
    assert gateway.event_count() == before
