"""Hosted benchmarks declared by a bare `name[@version]` are found in the default registry, like a
benchmark added so through the API (test_default_registry.py): at start, in every workspace, and in each
workspace created later.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from regatta_gateway.errors import Refused

from .conftest import Gateway
from .test_default_registry import added_sources, open_gateway, write_registry

__all__ = ["open_gateway"]  # the fixture, used by name

DECLARED = json.dumps([{"dataset": "terminal-bench@1.0", "name": "terminal-bench"}])


def hosted(gw: Gateway, workspace: str) -> list[tuple[str, bool]]:
    rows = gw.ok(gw.v1("GET", "/benchmarks", workspace=workspace))["benchmarks"]
    return [(b["name"], b["hosted"]) for b in rows]


def test_a_hosted_benchmark_named_by_dataset_comes_from_the_default_registry(
    open_gateway: Any, tmp_path: Path
) -> None:
    registry = write_registry(tmp_path / "reg" / "registry.json")
    gw = open_gateway(str(registry), hosted_benchmarks=DECLARED)
    gw.workspace("team-b")
    assert hosted(gw, "default") == hosted(gw, "team-b") == [("terminal-bench", True)]
    sources = list(added_sources(gw).values())
    assert len(sources) == 2
    for source in sources:
        # The operator's local registry file: trusted, like any hosted benchmark's.
        assert (source["registry_path"], source["dataset"], source["version"]) == (
            str(registry),
            "terminal-bench",
            "1.0",
        )
        assert source["trusted"] is True


def test_an_unreadable_default_registry_leaves_the_hosted_benchmark_out_but_the_gateway_starts(
    open_gateway: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="regatta.gateway"):
        gw = open_gateway(str(tmp_path / "missing" / "registry.json"), hosted_benchmarks=DECLARED)
    assert hosted(gw, "default") == []
    assert "terminal-bench@1.0 left out" in caplog.text


def test_a_hosted_dataset_the_default_registry_does_not_list_stops_the_gateway_at_start(
    open_gateway: Any, tmp_path: Path
) -> None:
    registry = write_registry(tmp_path / "reg" / "registry.json")
    unknown = json.dumps([{"dataset": "terminal-bench@9.9"}])
    with pytest.raises(Refused) as refused:
        open_gateway(str(registry), hosted_benchmarks=unknown)
    assert refused.value.field == "dataset" and "no version '9.9'" in refused.value.message
