"""A registry's dataset list (Harbor's registry JSON) read as the hostile input it is: someone else's
JSON, fetched over the internet through the outbound guard (every hop's address checked, no proxies),
each answer within REGATTA_FETCH_MAX_MB and REGATTA_FETCH_TIMEOUT_SEC (regatta_shared.security.answers), each
row checked for kind and length before it is shown or used; malformed rows are skipped and counted.
default_registry.py caches it and resolves names against it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from regatta_shared.security.answers import AnswerRefused
from regatta_shared.security.outbound import OutboundRefused, guarded_client, reason_of
from regatta_shared.security.source_policy import SourcePolicy

READ_TIMEOUT_SEC = 15.0
MAX_REDIRECTS = 5
# The operator's own registry file (a URL's answer is bounded by REGATTA_FETCH_MAX_MB instead).
MAX_FILE_BYTES = 32 * 1024 * 1024
MAX_DATASETS = 20_000
MAX_NAME = 200
MAX_VERSION = 100
MAX_DESCRIPTION = 500
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


def is_url(location: str) -> bool:
    return location.lower().startswith(("http://", "https://"))


def read_catalog(location: str, policy: SourcePolicy) -> Catalog:
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
        if path.stat().st_size > MAX_FILE_BYTES:
            raise RegistryUnavailable(f"registry {location}: larger than {MAX_FILE_BYTES} bytes")
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        raise RegistryUnavailable(f"registry {location}: cannot be read") from None


def _fetch(url: str, policy: SourcePolicy) -> str:
    field = "default registry"
    try:
        with guarded_client(
            policy.outbound,
            field,
            policy.answers,
            # Each read within this too: a registry gone silent is cut off before the answer's bound.
            timeout=min(READ_TIMEOUT_SEC, policy.answers.seconds),
            follow_redirects=True,
            max_redirects=MAX_REDIRECTS,
        ) as client:
            response = client.get(url)
            response.raise_for_status()
            return response.content.decode()
    except (OutboundRefused, AnswerRefused, httpx.HTTPError, OSError) as error:
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
