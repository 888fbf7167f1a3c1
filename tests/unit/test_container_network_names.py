"""The sandbox network's names reach `iptables` and the engine: only names of their kind get there."""

from __future__ import annotations

from pathlib import Path

import pytest
from regatta_executor.container.network import NetworkIsolationError, ensure_sandbox_network


@pytest.mark.parametrize(
    ("name", "bridge"),
    [
        ("regatta-sandbox", "-jACCEPT"),  # an option where iptables expects an interface
        ("regatta-sandbox", "--flush"),
        ("regatta-sandbox", "regatta0; rm"),
        ("regatta-sandbox", "a" * 16),  # longer than an interface name may be
        ("-regatta", "regatta0"),
        ("regatta sandbox", "regatta0"),
    ],
)
def test_names_that_are_not_names_are_refused_before_anything_runs(
    name: str, bridge: str, tmp_path: Path
) -> None:
    # No client: a refused name must be refused before the engine or iptables is asked anything.
    with pytest.raises(NetworkIsolationError, match="invalid sandbox network name"):
        ensure_sandbox_network(None, name, bridge, tmp_path / "state")  # type: ignore[arg-type]
    assert not (tmp_path / "state").exists()
