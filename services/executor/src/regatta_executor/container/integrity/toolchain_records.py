"""What explains a change to the verifier's tool chain: the package managers' own records in the
container (dpkg's `md5sums` and file lists, pip's `RECORD`), Python's byte-code cache, and the loader's
cache. Pure functions over what toolchain.py read out of the container.

How far each can be trusted: the records are files in the container, which the agent, as root there,
can write. A match says a package manager (or something that wrote its records) put the file there, the
way an honest install does; it does not prove the file came from a package's publisher.
docs/reliability.md says what each verifier-integrity policy makes of that.
"""

from __future__ import annotations

import base64
import binascii
import posixpath
import re
from dataclasses import dataclass, field

from regatta_shared.events.integrity import Explanation

# Debian's merged /usr: dpkg's records may name /bin/bash where the file lives at /usr/bin/bash.
_MERGED = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+.-]*(:[a-z0-9-]+)?$")
_MD5 = re.compile(r"^[0-9a-f]{32}$")
_PYC = re.compile(r"^(?P<dir>.*)/__pycache__/(?P<name>[^/]+?)\.[a-z]+-\d+(\.opt-\d)?\.pyc$")
LOADER_CACHE = "/etc/ld.so.cache"


@dataclass(frozen=True)
class Observed:
    """What the platform read of a changed path in the container after the agent's turn."""

    sha256: str | None = None
    md5: str | None = None
    size: int | None = None


@dataclass
class Records:
    # path -> (md5, package), from the md5sums of packages the agent's turn installed or changed
    dpkg_md5: dict[str, tuple[str, str]] = field(default_factory=dict)
    # path -> package, from those packages' file lists (symlinks have no md5sums entry)
    dpkg_listed: dict[str, str] = field(default_factory=dict)
    # absolute path -> (sha256 hex or None, size or None, distribution), from changed RECORD files
    pip: dict[str, tuple[str | None, int | None, str]] = field(default_factory=dict)


def spellings(path: str) -> tuple[str, ...]:
    """`path` and its other spelling under a merged /usr (/bin/x and /usr/bin/x)."""
    for top in _MERGED:
        if path.startswith(top + "/"):
            return (path, "/usr" + path)
        if path.startswith("/usr" + top + "/"):
            return (path, path[4:])
    return (path,)


def add_dpkg(records: Records, name: str, text: str) -> None:
    """One dpkg info file (`<package>.md5sums` or `<package>.list`); other names are ignored."""
    stem, _, suffix = name.rpartition(".")
    if not _PACKAGE.match(stem) or suffix not in ("md5sums", "list"):
        return
    for line in text.splitlines():
        if suffix == "list":
            if line.startswith("/"):
                for spelling in spellings(line):
                    records.dpkg_listed.setdefault(spelling, stem)
            continue
        digest, sep, relative = line.partition("  ")
        if sep and _MD5.match(digest) and relative:
            for spelling in spellings("/" + relative.lstrip("/")):
                records.dpkg_md5.setdefault(spelling, (digest, stem))


def add_pip_record(records: Records, record_path: str, text: str) -> None:
    """One installed distribution's RECORD (`<site>/<name>-<version>.dist-info/RECORD`): each line is
    `path,sha256=<urlsafe base64>,size`, the path relative to the site folder."""
    dist_info = posixpath.dirname(record_path)
    if not dist_info.endswith(".dist-info"):
        return
    site = posixpath.dirname(dist_info)
    distribution = posixpath.basename(dist_info)[: -len(".dist-info")]
    for line in text.splitlines():
        relative, _, rest = line.partition(",")
        if not relative:
            continue
        digest_field, _, size_field = rest.partition(",")
        path = posixpath.normpath(posixpath.join(site, relative))
        sha256 = _record_sha256(digest_field)
        size = int(size_field) if size_field.isdigit() else None
        if sha256 is None and path != record_path:
            continue  # only RECORD lists itself without a hash
        records.pip.setdefault(path, (sha256, size, distribution))


def _record_sha256(value: str) -> str | None:
    algorithm, _, encoded = value.partition("=")
    if algorithm != "sha256" or not encoded:
        return None
    try:
        return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).hex()
    except (binascii.Error, ValueError):
        return None


def explain(path: str, kind: str, observed: Observed | None, records: Records) -> Explanation | None:
    """What accounts for `path` (added or changed, of `kind` file/symlink/other), or None."""
    if kind == "file" and path.endswith(".dist-info/RECORD") and records.pip.get(path, ("",))[0] is None:
        return Explanation(source="pip", package=records.pip[path][2][:300])  # RECORD lists itself
    if kind == "file" and observed is not None and observed.sha256 is not None:
        found = records.pip.get(path)
        if found is not None:
            digest, size, distribution = found
            if digest == observed.sha256 and (size is None or size == observed.size):
                return Explanation(source="pip", package=distribution[:300])
        for spelling in spellings(path):
            entry = records.dpkg_md5.get(spelling)
            if entry is not None and entry[0] == observed.md5:
                return Explanation(source="dpkg", package=entry[1][:300])
        return None
    if kind == "symlink":
        for spelling in spellings(path):
            if spelling in records.dpkg_listed:
                return Explanation(source="dpkg", package=records.dpkg_listed[spelling][:300])
        if path in records.pip:
            return Explanation(source="pip", package=records.pip[path][2][:300])
    return None


def bytecode_source(path: str) -> str | None:
    """The source module of a byte-code cache file (`x/__pycache__/m.cpython-312.pyc` -> `x/m.py`)."""
    match = _PYC.match(path)
    return f"{match['dir']}/{match['name']}.py" if match else None


def loader_cache_libraries(data: bytes) -> list[str]:
    """The absolute paths the loader's cache names (its string table: sonames and the files they map
    to; only the files start with `/`)."""
    found = []
    for item in data.split(b"\0"):
        if item.startswith(b"/") and len(item) < 4096:
            try:
                found.append(item.decode("utf-8"))
            except UnicodeDecodeError:
                found.append(item.decode("utf-8", "replace"))
    return found
