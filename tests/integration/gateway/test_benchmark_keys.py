"""Issue 38: a benchmark's key (`source_ref`, the Osmosis CLI's "Key") has one shape for every dataset: a
registry or hub dataset added without a version is `name@latest` (it follows the newest version at each
sync), beside `name@version` for a pinned one. The event keeps the source as it was asked for, so keys of
benchmarks added before are written the same way once the read model is rebuilt; and the bare `name` they
had, which scripts and run configurations may still name, keeps finding them, as `name@latest` finds a row
not rebuilt yet."""

from __future__ import annotations

from urllib.parse import quote

from regatta_gateway.readmodels import tables as t
from regatta_shared.events import BenchmarkAdded
from regatta_shared.ids import benchmark_stream
from sqlalchemy import update

from .conftest import Gateway

REGISTRY = "/srv/benchmarks/registry.json"


def _add(gw: Gateway, name: str, **source: str) -> str:
    body = {"name": name, **source}
    return gw.ok(gw.v1("POST", "/benchmarks", json=body), 201)["id"]


def _keys(gw: Gateway) -> dict[str, str]:
    rows = gw.ok(gw.v1("GET", "/benchmarks"))["benchmarks"]
    return {row["name"]: row["source_ref"] for row in rows}


def test_a_dataset_added_without_a_version_is_keyed_name_at_latest_and_found_by_either_spelling(
    gateway: Gateway,
) -> None:
    gw = gateway
    floating = _add(gw, "Floating set", source_type="registry", registry_path=REGISTRY, dataset="floaty")
    pinned = _add(gw, "Pinned set", source_type="registry", registry_path=REGISTRY, dataset="pinny@1.0")
    _add(gw, "Hub set", source_type="hub", dataset="org/hubby")
    _add(gw, "Folder set", source_type="folder", path="/srv/benchmarks/folder")
    assert _keys(gw) == {
        "Floating set": "floaty@latest",
        "Pinned set": "pinny@1.0",
        "Hub set": "org/hubby@latest",
        "Folder set": "/srv/benchmarks/folder",
    }
    # The recorded source is what was asked for: the key is derived, for new and old events alike.
    (added,) = [
        e for e in gw.store.read_stream(benchmark_stream(floating)) if e.type == BenchmarkAdded.type_name
    ]
    assert (added.data["source"]["ref"], added.data["source"]["version"]) == ("floaty", None)

    for key, benchmark_id in [
        ("floaty@latest", floating),
        ("floaty", floating),  # the key it had before
        ("pinny@1.0", pinned),
    ]:
        path = f"/benchmarks/{quote(key, safe='@')}"
        assert gw.ok(gw.v1("GET", path))["benchmark"]["id"] == benchmark_id, key
        assert gw.ok(gw.cli("GET", path))["benchmark"]["id"] == benchmark_id, key
    # A pinned key is not a floating one: `pinny` names no benchmark.
    assert gw.v1("GET", "/benchmarks/pinny").status_code == 404

    # A row the old projection wrote (key `floaty`) is found by the new key too.
    with gw.store.engine.begin() as conn:
        conn.execute(update(t.benchmarks).where(t.benchmarks.c.id == floating).values(source_ref="floaty"))
    for key in ("floaty@latest", "floaty"):
        assert gw.ok(gw.v1("GET", f"/benchmarks/{key}"))["benchmark"]["id"] == floating, key
