"""Secrets planted on the host in places only the host's root may read, for tests proving a sandbox
cannot see them. A sandbox's own image may hold files named like the host's (/etc/shadow, /var/lib/dpkg);
these names and this content exist only on the host, so finding either inside means the host leaked."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PlantedSecret:
    value: str
    paths: list[Path]
    """A 0600 file in /etc, one in a 0700 folder of /var/lib, one in /root."""


@contextlib.contextmanager
def planted_host_secret() -> Iterator[PlantedSecret]:
    value = f"host-only-{secrets.token_hex(12)}"
    name = f"regatta-hostile-{secrets.token_hex(4)}"
    paths = [Path("/etc", name), Path("/var/lib", name, "secret"), Path("/root", name)]
    try:
        for path in paths:
            path.parent.mkdir(mode=0o700, exist_ok=True)
            path.touch(mode=0o600)
            path.write_text(value + "\n")
        yield PlantedSecret(value, paths)
    finally:
        for path in paths:
            path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            Path("/var/lib", name).rmdir()
