"""The default registry (`REGATTA_DEFAULT_REGISTRY`): its dataset list for browsing, and a bare
`name[@version]` resolved against it when a benchmark is added.

The registry is someone else's JSON (Harbor's, by default, fetched over the internet), so it is read as
hostile: through the outbound guard (every hop's address checked, no proxies), within a size cap and a
timeout, each row checked for kind and length before it is shown or used; malformed rows are skipped and
counted. The parsed list is kept for `REGATTA_DEFAULT_REGISTRY_CACHE_SECONDS`, a failure for a short while,
so an unreachable registry costs one timeout per FAILURE_TTL, not one per dialog opened.
"""

from __future__ import annotations

import difflib
import json
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from regatta_shared.events import BenchmarkSource
from regatta_shared.outbound import OutboundPolicy, OutboundRefused, guarded_client, reason_of

from regatta_gateway.http.errors import ApiError

FETCH_TIMEOUT_SEC = 15.0
MAX_REDIRECTS = 5
# The same cap registry-sync reads a registry with (regatta_registry_sync.registry_json).
MAX_REGISTRY_BYTES = 32 * 1024 * 1024
MAX_DATASETS = 20_000
MAX_NAME = 200
MAX_VERSION = 100
MAX_DESCRIPTION = 500
FAILURE_TTL = 30.0
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class RegistryUnavailable(Exception):
    """The registry could not be read; `str()` names it and a reason class, never its content."""


@dataclass(frozen=True)
class Entry:
    name: str
    version: str
    description: str
    task_count: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "dataset": f"{self.name}@{self.version}",
            "description": self.description,
            "task_count": self.task_count,
        }


@dataclass(frozen=True)
class Catalog:
    location: str
    entries: tuple[Entry, ...]
    skipped: int

    def names(self) -> list[str]:
        return sorted({e.name for e in self.entries})

    def versions(self, name: str) -> list[str]:
        return [e.version for e in self.entries if e.name == name]


# --- reading ----------------------------------------------------------------------------------------


def is_url(location: str) -> bool:
    return location.lower().startswith(("http://", "https://"))


def read_catalog(location: str, policy: OutboundPolicy) -> Catalog:
    if is_url(location):
        text = _fetch(location, policy)
    elif location.startswith("/"):
        text = _read(location)
    else:
        raise RegistryUnavailable("REGATTA_DEFAULT_REGISTRY must be an http(s) URL or an absolute path")
    return parse_catalog(text, location)


def registry_file(location: str) -> Path:
    """A folder means the registry.json in it, as registry-sync reads a registry_path."""
    path = Path(location)
    return path / "registry.json" if path.is_dir() else path


def _read(location: str) -> str:
    path = registry_file(location)
    try:
        if not path.is_file():
            raise RegistryUnavailable(f"registry {location}: file not found")
        if path.stat().st_size > MAX_REGISTRY_BYTES:
            raise RegistryUnavailable(f"registry {location}: larger than {MAX_REGISTRY_BYTES} bytes")
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        raise RegistryUnavailable(f"registry {location}: cannot be read") from None


def _fetch(url: str, policy: OutboundPolicy) -> str:
    field = "default registry"
    try:
        with (
            guarded_client(
                policy, field, timeout=FETCH_TIMEOUT_SEC, follow_redirects=True, max_redirects=MAX_REDIRECTS
            ) as client,
            client.stream("GET", url) as response,
        ):
            response.raise_for_status()
            body = bytearray()
            # The timeout above bounds each read; this bounds the whole transfer, so a registry that
            # trickles bytes cannot hold a request thread for longer.
            deadline = time.monotonic() + FETCH_TIMEOUT_SEC * 4
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > MAX_REGISTRY_BYTES:
                    raise RegistryUnavailable(f"registry {url}: larger than {MAX_REGISTRY_BYTES} bytes")
                if time.monotonic() > deadline:
                    raise RegistryUnavailable(f"registry {url}: timed out")
            return body.decode()
    except (OutboundRefused, httpx.HTTPError, OSError) as error:
        raise RegistryUnavailable(f"registry {url}: {reason_of(error)}") from None
    except UnicodeDecodeError:
        raise RegistryUnavailable(f"registry {url}: not UTF-8 text") from None


def parse_catalog(text: str, location: str) -> Catalog:
    try:
        rows = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        raise RegistryUnavailable(f"registry {location}: malformed JSON") from None
    if not isinstance(rows, list):
        raise RegistryUnavailable(f"registry {location}: expected a JSON array of datasets")
    entries: list[Entry] = []
    skipped = 0
    for row in rows[:MAX_DATASETS]:
        entry = _entry(row)
        if entry is None:
            skipped += 1
        else:
            entries.append(entry)
    skipped += max(0, len(rows) - MAX_DATASETS)
    entries.sort(key=lambda e: (e.name.lower(), _version_order(e.version)))
    return Catalog(location=location, entries=tuple(entries), skipped=skipped)


def _entry(row: Any) -> Entry | None:
    """A row as Harbor's DatasetSpec requires it (name, version, description, tasks), or None."""
    if not isinstance(row, dict):
        return None
    name, version, description, tasks = (row.get(k) for k in ("name", "version", "description", "tasks"))
    if not (_token(name, MAX_NAME) and _token(version, MAX_VERSION)):
        return None
    if not isinstance(description, str) or not isinstance(tasks, list):
        return None
    text = " ".join(CONTROL.sub(" ", description).split())
    if len(text) > MAX_DESCRIPTION:
        text = text[: MAX_DESCRIPTION - 1].rstrip() + "…"
    return Entry(name=name, version=version, description=text, task_count=len(tasks))


def _token(value: Any, limit: int) -> bool:
    """A name or version usable as `name@version`: no '@', whitespace or control characters."""
    return (
        isinstance(value, str)
        and 0 < len(value) <= limit
        and "@" not in value
        and not CONTROL.search(value)
        and not any(c.isspace() for c in value)
    )


def _version_order(version: str) -> tuple[int, list[Any]]:
    """`head` first, then higher versions first (numbers compared as numbers)."""
    if version == "head":
        return (0, [])
    parts = re.findall(r"\d+|[^\d.]+", version)
    return (1, [(0, -int(p)) if p.isdigit() else (1, p) for p in parts])


# --- the cache --------------------------------------------------------------------------------------


class DefaultRegistry:
    """The deployment's default registry, read at most once per TTL (one reader at a time)."""

    def __init__(self, location: str, policy: OutboundPolicy, ttl: float) -> None:
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


def unavailable(registry: DefaultRegistry, error: RegistryUnavailable) -> ApiError:
    return ApiError(
        503,
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
        raise ApiError(
            400,
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
        raise ApiError(
            400,
            f"dataset {name!r} is not in the default registry{hint}",
            code="VALIDATION",
            field="dataset",
            suggestions=close,
        )
    if source.version and source.version not in versions:
        raise ApiError(
            400,
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
