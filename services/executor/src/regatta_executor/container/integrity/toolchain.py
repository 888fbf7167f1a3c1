"""The verifier's tool chain after the agent's turn: every file of it that differs from the image's,
with the facts of both sides and what explains the change (toolchain_records.py).

The tool chain is what protected_paths.py protects: the programs on the image's PATH, the library folders
and any shared object, the loader's configuration and cache, and (through the library folders and
/root/.local/lib) Python's start-up hooks. What differs comes from two listings by the platform's own
busybox (file_listing.py): the image's, taken when its first container started, and the container's now;
the engine's changes API where no image listing was taken. The container's side is then read in one exec
of the platform's shell: the SHA-256 and MD5 of each changed regular file, each changed symlink's target,
each changed pip RECORD, the dpkg records changed during the container's life, and the loader's cache if
it changed. The image's side of a changed file comes from a container of the image that never starts.

Under the `record` policy this is evidence only; under `enforce` an unexplained change fails the attempt
(environment.py). Nothing here changes the container.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import io
import secrets
import stat
import tarfile
from dataclasses import dataclass, field
from typing import Literal

import docker
from docker.errors import DockerException
from regatta_shared.events.integrity import Explanation, FileFacts, ToolChainChange

from regatta_executor.attempt.sandbox_faults import SandboxTamperedError
from regatta_executor.container.exec import commands as execs
from regatta_executor.container.exec.tools import BUSYBOX, platform_shell
from regatta_executor.container.integrity import file_listing
from regatta_executor.container.integrity.file_listing import ADDED, DELETED, Record
from regatta_executor.container.integrity.image_files import ImageFiles
from regatta_executor.container.integrity.protected_paths import ProtectedPaths
from regatta_executor.container.integrity.toolchain_records import (
    LOADER_CACHE,
    Observed,
    Records,
    add_dpkg,
    add_pip_record,
    bytecode_source,
    explain,
    loader_cache_libraries,
    spellings,
)

# What the one exec reads at most: past these, files are left unhashed (so unexplained).
MAX_HASHED_FILES = 20_000
MAX_LINKS = 500
MAX_RECORD_FILES = 500
MAX_OUTPUT_BYTES = 128 * 1024 * 1024
# The image's side of a changed file is hashed for this many (unexplained first).
MAX_IMAGE_HASHES = 10

_READ = r"""
n=$1; B=$2; m=$3; shift 3
list=$($B cat)
echo "$n sha256"
[ -z "$list" ] || printf '%s\n' "$list" | $B tr '\n' '\0' | $B xargs -0 -r $B sha256sum -- 2>/dev/null
echo "$n md5"
[ -z "$list" ] || printf '%s\n' "$list" | $B tr '\n' '\0' | $B xargs -0 -r $B md5sum -- 2>/dev/null
for a do
  p=${a#?}
  case $a in
    L*) echo "$n link $p"; $B readlink -- "$p" 2>/dev/null ;;
    C*) echo "$n record $p"; $B head -c 8388608 -- "$p" 2>/dev/null ;;
    X*) echo "$n ldcache"; $B base64 -w 0 < "$p" 2>/dev/null; echo ;;
  esac
done
for f in $($B find /var/lib/dpkg/info -cmin -"$m" \( -name '*.md5sums' -o -name '*.list' \) 2>/dev/null); do
  echo "$n dpkg ${f##*/}"; $B cat -- "$f" 2>/dev/null
done
echo "$n end"
"""


@dataclass(frozen=True)
class Entry:
    path: str
    change: Literal["added", "changed", "deleted"]
    before: Record | None
    after: Record | None


@dataclass
class ToolChainEvidence:
    changes: list[ToolChainChange] = field(default_factory=list)
    # Python byte-code caches explained only as such: removed before the verifier under `enforce`.
    bytecode: list[str] = field(default_factory=list)

    @property
    def unexplained(self) -> list[ToolChainChange]:
        return [change for change in self.changes if change.unexplained]


def _kind(record: Record | None) -> Literal["file", "symlink", "directory", "other"]:
    if record is None:
        return "other"
    mode = record[1]
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "directory"
    return "other"


def _facts(record: Record | None, sha256: str | None = None, link: str | None = None) -> FileFacts | None:
    if record is None:
        return None
    _ctime, mode, uid, gid, size = record
    kind = _kind(record)
    return FileFacts(
        kind=kind,
        size=size if kind == "file" else None,
        sha256=sha256,
        mode=stat.S_IMODE(mode),
        uid=uid,
        gid=gid,
        link=link[:1024] if link is not None else None,
    )


def _entries(
    api: docker.APIClient, container: str, image_id: str, scope: ProtectedPaths
) -> tuple[list[Entry], dict[str, Record] | None, dict[str, Record] | None]:
    """The tool chain's changes, and both listings where there are (None: the engine's changes API)."""
    image = file_listing.known(image_id)
    try:
        now = file_listing.take(api, container, image.scope if image is not None else scope)
    except file_listing.ListingError as exc:
        # After the agent's turn the container is the agent's doing: what stops the platform's own
        # listing is its failure, and nothing in it can be vouched for.
        raise SandboxTamperedError(f"the container's files could not be checked: {exc}") from exc
    if image is None:
        found = [(str(c["Path"]), int(c["Kind"])) for c in (api.diff(container) or []) if c.get("Path")]
        changes = [(path, kind) for path, kind in found if scope.covers(path)]
        before: dict[str, Record] = {}
    else:
        changes = file_listing.changes(image.files, now.files)
        before = image.files
    names = {ADDED: "added", DELETED: "deleted"}
    entries = [
        Entry(path, names.get(kind, "changed"), before.get(path), now.files.get(path))  # type: ignore[arg-type]
        for path, kind in changes
    ]
    return entries, (image.files if image is not None else None), now.files


def _read(
    api: docker.APIClient, container: str, entries: list[Entry], minutes: int
) -> tuple[dict[str, Observed], dict[str, str], Records, bytes | None]:
    """The container's side of the changes, in one exec of the platform's shell."""
    regular, arguments = [], []
    for entry in entries:
        if entry.change == "deleted" or "\n" in entry.path:
            continue
        kind = _kind(entry.after)
        if kind == "file" and len(regular) < MAX_HASHED_FILES:
            regular.append(entry.path)
            if entry.path.endswith(".dist-info/RECORD") and len(arguments) < MAX_RECORD_FILES:
                arguments.append("C" + entry.path)
            if entry.path == LOADER_CACHE:
                arguments.append("X" + entry.path)
        elif kind == "symlink" and sum(a.startswith("L") for a in arguments) < MAX_LINKS:
            arguments.append("L" + entry.path)
    nonce = secrets.token_hex(16)
    stdin = ("".join(path + "\n" for path in regular)).encode("utf-8", "surrogateescape")
    result = execs.run_platform(
        api,
        container,
        platform_shell(_READ, nonce, BUSYBOX, str(minutes), *arguments),
        max_output_bytes=MAX_OUTPUT_BYTES,
        stdin=io.BytesIO(stdin),
    )
    return _parse(result.stdout, nonce)


def _parse(output: str, nonce: str) -> tuple[dict[str, Observed], dict[str, str], Records, bytes | None]:
    """Sections, each under a line that starts with the nonce (no file's content can forge one)."""
    head = nonce + " "
    sections: list[tuple[str, list[str]]] = []
    for line in output.split("\n"):
        if line.startswith(head):
            sections.append((line[len(head) :], []))
        elif sections:
            sections[-1][1].append(line)
    if not sections or sections[-1][0] != "end":
        raise SandboxTamperedError("the container's changed files could not be read to the end")
    sha256: dict[str, str] = {}
    md5: dict[str, str] = {}
    links: dict[str, str] = {}
    records = Records()
    ldcache: bytes | None = None
    for title, lines in sections:
        name, _, rest = title.partition(" ")
        if name in ("sha256", "md5"):
            target = sha256 if name == "sha256" else md5
            for line in lines:
                digest, sep, path = line.partition("  ")
                if sep:
                    target[path] = digest
        elif name == "link":
            links[rest] = "\n".join(lines).rstrip("\n")
        elif name == "record":
            add_pip_record(records, rest, "\n".join(lines))
        elif name == "dpkg":
            add_dpkg(records, rest, "\n".join(lines))
        elif name == "ldcache":
            with contextlib.suppress(binascii.Error, ValueError):
                ldcache = base64.b64decode("".join(lines), validate=False)
    observed = {path: Observed(sha256=digest, md5=md5.get(path)) for path, digest in sha256.items()}
    return observed, links, records, ldcache


def evidence(
    api: docker.APIClient,
    container: str,
    image_id: str,
    labels: dict[str, str],
    *,
    minutes: int,
) -> ToolChainEvidence:
    """Every change to the verifier's tool chain, explained where something explains it. `minutes`:
    how long ago (rounded up, with a margin) the container was created: the dpkg records written since
    are the agent's turn's."""
    scope = ProtectedPaths.of_image(api.inspect_image(image_id))
    entries, image_files, container_files = _entries(api, container, image_id, scope)
    # A folder that is still a folder (or new) is judged by its entries; one that became something else
    # (a symlink of the image's replaced by a real folder: new files at the image's paths) counts.
    entries = [e for e in entries if not _still_a_folder(e)]
    if not entries:
        return ToolChainEvidence()
    observed, links, records, ldcache = _read(api, container, entries, minutes)
    explained: dict[str, Explanation | None] = {}
    bytecode: list[str] = []
    for entry in entries:
        if entry.change == "deleted":
            continue
        seen = observed.get(entry.path)
        if seen is not None and entry.after is not None:
            seen = Observed(sha256=seen.sha256, md5=seen.md5, size=entry.after[4])
        explained[entry.path] = explain(entry.path, _kind(entry.after), seen, records)
    changed = {entry.path for entry in entries}
    for entry in entries:
        if entry.change == "deleted" or explained.get(entry.path) is not None:
            continue
        source = bytecode_source(entry.path)
        if (
            source is not None
            and container_files is not None
            and source in container_files
            and (source not in changed or explained.get(source) is not None)
        ):
            explained[entry.path] = Explanation(source="bytecode", package=source[:300])
            bytecode.append(entry.path)
    if LOADER_CACHE in explained and explained[LOADER_CACHE] is None and ldcache is not None:
        explained[LOADER_CACHE] = _loader_cache(ldcache, image_files, container_files, changed, explained)
    changes = [
        ToolChainChange(
            path=entry.path[:4096],
            change=entry.change,
            before=_facts(entry.before),
            after=_facts(
                entry.after,
                sha256=(observed.get(entry.path) or Observed()).sha256,
                link=links.get(entry.path),
            ),
            explained_by=explained.get(entry.path),
        )
        for entry in entries
    ]
    changes.sort(key=lambda c: (not c.unexplained, c.change == "deleted", c.path))
    return ToolChainEvidence(_with_image_hashes(api, image_id, labels, changes), bytecode)


def _still_a_folder(entry: Entry) -> bool:
    after = _kind(entry.after)
    return after == "directory" and (entry.before is None or _kind(entry.before) == "directory")


def _loader_cache(
    data: bytes,
    image_files: dict[str, Record] | None,
    container_files: dict[str, Record] | None,
    changed: set[str],
    explained: dict[str, Explanation | None],
) -> Explanation | None:
    """The loader's cache is explained when every library it names is the image's, unchanged, or a
    change explained above: `ldconfig` after an honest install. A library it names that the listings
    do not hold (outside the protected folders), or an unexplained one, leaves it unexplained."""
    if image_files is None or container_files is None:
        return None
    for library in loader_cache_libraries(data):
        if not any(s in container_files for s in spellings(library)):
            continue  # a stale entry: the loader finds no file there
        path = next(s for s in spellings(library) if s in container_files)
        if path in changed:
            if explained.get(path) is None:
                return None
        elif path not in image_files:
            return None
    return Explanation(source="ldconfig", package="the image's libraries and the explained ones")


def _with_image_hashes(
    api: docker.APIClient, image_id: str, labels: dict[str, str], changes: list[ToolChainChange]
) -> list[ToolChainChange]:
    """The image's SHA-256 of the first changed regular files (the list is ordered unexplained first)."""
    wanted = [
        i
        for i, c in enumerate(changes)
        if c.change != "added" and c.before is not None and c.before.kind == "file"
    ][:MAX_IMAGE_HASHES]
    if not wanted:
        return changes
    image = ImageFiles(api, image_id, labels)
    try:
        for index in wanted:
            change = changes[index]
            try:
                digest = image.sha256(change.path)
            except (DockerException, tarfile.TarError, OSError):
                continue
            if digest is not None and change.before is not None:
                before = change.before.model_copy(update={"sha256": digest})
                changes[index] = change.model_copy(update={"before": before})
    finally:
        image.close()
    return changes


def container_minutes(created_at: float, now: float) -> int:
    """Whole minutes back to the container's creation, and two more (the dpkg records' window)."""
    return int(max(0.0, now - created_at) // 60) + 2


def describe(changes: list[ToolChainChange], limit: int = 10) -> str:
    named = ", ".join(f"{c.path} ({c.change})" for c in changes[:limit])
    more = f" and {len(changes) - limit} more" if len(changes) > limit else ""
    return f"{named}{more}"
