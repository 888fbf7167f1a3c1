"""Which sources a user may name: host paths only under configured roots, network fetches only to
public addresses (or allow-listed ones).

A host folder, a local registry.json or git repository, or a `file://` URL is read by registry-sync and
its content comes back through task archives, so letting any member name one would let them read the
host. Only paths under `REGATTA_SOURCE_ROOTS` are open to everyone; a platform administrator (or the
deployment's own hosted benchmarks) may name any path. The gateway checks when the benchmark is added,
registry-sync again where it reads (a registry's JSON can name paths and git URLs of its own).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

from ..settings import Settings, load_settings
from .answers import AnswerBounds
from .outbound import OutboundPolicy

DEFAULT_ANSWERS = AnswerBounds.from_settings(Settings.model_construct())  # the settings' defaults


class SourceRefused(Exception):
    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field} {problem}")
        self.field = field
        self.problem = problem


@dataclass(frozen=True)
class SourcePolicy:
    roots: tuple[Path, ...] = ()
    outbound: OutboundPolicy = field(default_factory=OutboundPolicy)
    # What one answer of a registry or the hub may take: bytes and seconds (regatta_shared.security.answers).
    answers: AnswerBounds = DEFAULT_ANSWERS

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> SourcePolicy:
        settings = settings or load_settings()
        roots = tuple(Path(r).resolve() for r in settings.source_roots.split(os.pathsep) if r.strip())
        return cls(roots, OutboundPolicy.parse(settings.outbound_allow), AnswerBounds.from_settings(settings))

    def under_roots(self, path: str | Path) -> bool:
        resolved = Path(path).resolve()
        return any(resolved.is_relative_to(root) for root in self.roots)

    def check_host_path(self, path: str | Path, name: str, *, trusted: bool) -> None:
        """Refuse a host path outside the roots unless the source is trusted (a platform administrator's)."""
        if not trusted and not self.under_roots(path):
            raise SourceRefused(name, "names a host path outside REGATTA_SOURCE_ROOTS")


def local_path_of(git_url: str) -> str | None:
    """The host path a git URL reads (an absolute path or a file:// URL), or None for a network URL."""
    if git_url.startswith("/"):
        return git_url
    if git_url.lower().startswith("file:"):
        return unquote(urlsplit(git_url).path) or "/"
    return None
