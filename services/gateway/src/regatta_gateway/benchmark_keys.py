"""A benchmark's key: `source_ref` in the API, the Osmosis CLI's "Key" column, what `benchmark info <key>`
and `[experiment].benchmark` name it by. A registry or hub dataset's key is `name@version`; one added without
a version follows its source's newest version at every sync (Harbor's resolution: `head`, else the highest),
and its key says so: `name@latest`, never a bare `name` beside others' `name@version`. Any other source's key
is its reference (a folder's path, a repository's URL[@ref]). The event keeps the source as it was asked for;
the key is derived from it where it is shown and looked up."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

LATEST = "latest"
_AT_LATEST = f"@{LATEST}"
_VERSIONED = ("registry", "hub")


def benchmark_key(source: Mapping[str, Any]) -> str:
    ref = str(source.get("ref") or "")
    if source.get("type") in _VERSIONED and not source.get("version") and "@" not in ref:
        return ref + _AT_LATEST
    return ref


def key_forms(key: str) -> list[str]:
    """The stored keys `key` names: itself and, for a versionless dataset, its other spelling (`name` as
    keys were before they said `@latest`, which read models not yet rebuilt still hold, and `name@latest`)."""
    if key.endswith(_AT_LATEST) and len(key) > len(_AT_LATEST):
        return [key, key[: -len(_AT_LATEST)]]
    if key and "@" not in key:
        return [key, key + _AT_LATEST]
    return [key]
