"""The default registry (`REGATTA_DEFAULT_REGISTRY`): its dataset list for browsing, and a bare
`name[@version]` resolved against it when a benchmark is added.

The list is read as hostile input (registry_catalog.py). The parsed list is kept for
`REGATTA_DEFAULT_REGISTRY_CACHE_SECONDS`, a failure for a short while, so an unreachable registry costs
one timeout per FAILURE_TTL, not one per dialog opened.
"""

from __future__ import annotations

import difflib
import threading
import time
from typing import Any

from regatta_shared.events import BenchmarkSource
from regatta_shared.security.source_policy import SourcePolicy
from regatta_shared.settings import Settings

from regatta_gateway.admission.registry_catalog import Catalog, RegistryUnavailable, is_url, read_catalog
from regatta_gateway.errors import Invalid, Refused, Unavailable

FAILURE_TTL = 30.0


# --- the cache --------------------------------------------------------------------------------------


class DefaultRegistry:
    """The deployment's default registry, read at most once per TTL (one reader at a time)."""

    @classmethod
    def from_settings(cls, settings: Settings) -> DefaultRegistry:
        policy = SourcePolicy.from_settings(settings)
        return cls(settings.default_registry, policy, settings.default_registry_cache_seconds)

    def __init__(self, location: str, policy: SourcePolicy, ttl: float) -> None:
        self.location = location.strip()
        self._policy = policy
        self._ttl = ttl
        self._lock = threading.Lock()
        self._read_at = -1e18
        self._value: Catalog | RegistryUnavailable | None = None

    def catalog(self) -> Catalog:
        if not self.location:
            raise RegistryUnavailable("no default registry is configured (REGATTA_DEFAULT_REGISTRY)")
        with self._lock:
            age = time.monotonic() - self._read_at
            fresh = isinstance(self._value, Catalog) and age < self._ttl
            failed_recently = isinstance(self._value, RegistryUnavailable) and age < min(
                FAILURE_TTL, self._ttl
            )
            if not (fresh or failed_recently):
                try:
                    self._value = read_catalog(self.location, self._policy)
                except RegistryUnavailable as error:
                    self._value = error
                self._read_at = time.monotonic()
            value = self._value
        if isinstance(value, RegistryUnavailable):
            raise value
        assert value is not None
        return value


# --- browsing and resolving -------------------------------------------------------------------------


def search(catalog: Catalog, query: str, limit: int, offset: int) -> dict[str, Any]:
    """Datasets whose name or description holds every word of `query` (case-insensitive)."""
    words = query.lower().split()
    found = [e for e in catalog.entries if all(w in f"{e.name} {e.description}".lower() for w in words)]
    return {
        "registry": catalog.location,
        "total": len(found),
        "skipped": catalog.skipped,
        "datasets": [e.as_dict() for e in found[offset : offset + limit]],
    }


def browse(registry: DefaultRegistry, query: str, limit: int, offset: int) -> dict[str, Any]:
    """The default registry's datasets matching `query`; none configured is an empty list, not an error."""
    if not registry.location:
        return {"registry": None, "total": 0, "skipped": 0, "datasets": []}
    try:
        return search(registry.catalog(), query, limit, offset)
    except RegistryUnavailable as error:
        raise unavailable(registry, error) from None


def unavailable(registry: DefaultRegistry, error: RegistryUnavailable) -> Refused:
    return Unavailable(
        f"The default registry cannot be reached: {error}",
        code="REGISTRY_UNAVAILABLE",
        registry=registry.location or None,
    )


def needs_default(source: BenchmarkSource) -> bool:
    return source.type == "registry" and not source.registry_path and not source.registry_url


def resolve_named(source: BenchmarkSource, registry: DefaultRegistry) -> BenchmarkSource:
    """A registry source named only by `name[@version]`, pointed at the default registry once the name (and
    the version, if given) is in its list; otherwise 400 naming the close names or the versions it has.

    Only a local registry file is trusted (the operator's file, like a hosted benchmark's): a remote
    registry's JSON stays untrusted, so its tasks can never name paths on the registry-sync host."""
    name = source.dataset or ""
    if not registry.location:
        raise Invalid(
            "registry_path (a file) or registry_url is required: no default registry is configured",
            code="VALIDATION",
            field="registry_path",
        )
    try:
        catalog = registry.catalog()
    except RegistryUnavailable as error:
        problem = unavailable(registry, error)
        problem.message = (
            f"{problem.message}; name a registry_url or registry_path, or a hub dataset (org/name)"
        )
        raise problem from None
    versions = catalog.versions(name)
    if not versions:
        close = close_names(name, catalog.names())
        hint = f"; close names: {', '.join(close)}" if close else "; GET /api/v1/registry/datasets lists them"
        raise Invalid(
            f"dataset {name!r} is not in the default registry{hint}",
            code="VALIDATION",
            field="dataset",
            suggestions=close,
        )
    if source.version and source.version not in versions:
        raise Invalid(
            f"dataset {name!r} has no version {source.version!r} in the default registry "
            f"(available: {', '.join(versions)})",
            code="VALIDATION",
            field="dataset",
            suggestions=[f"{name}@{v}" for v in versions],
        )
    location = registry.location
    if is_url(location):
        return source.model_copy(update={"registry_url": location})
    return source.model_copy(update={"registry_path": location, "trusted": True})


def close_names(name: str, names: list[str], count: int = 5) -> list[str]:
    """Names like `name`: difflib's close matches (case-insensitive), then names containing it."""
    lowered = {n.lower(): n for n in names}
    close = [lowered[n] for n in difflib.get_close_matches(name.lower(), list(lowered), n=count, cutoff=0.6)]
    if name:
        close += [n for n in names if name.lower() in n.lower() and n not in close]
    return close[:count]
