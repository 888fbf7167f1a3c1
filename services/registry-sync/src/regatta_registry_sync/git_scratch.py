"""A remote's commits in a bare repository of our own under the sync's working folder (git_bounds.py):
their trees only, then the blobs asked for, each fetch under a byte cap watched while git writes it, and
every git process with only the URL's own transport, no hooks, no credential helper, no prompt, a
timeout, and its arguments after `--`."""

from __future__ import annotations

import asyncio
import contextlib
import os
import posixpath
import shutil
import signal
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from regatta_shared.security.git_values import git_environment
from regatta_shared.security.outbound import UNREACHABLE

_MIB = 1024 * 1024
# The trees of one commit: a repository of a million files has trees of a few tens of MiB.
TREES_MAX_BYTES = 64 * _MIB
WATCH_INTERVAL_SEC = 0.2
GIT_TIMEOUT_SEC = 600.0


class GitTooLarge(Exception):
    """What a commit's fetch would write passes its cap; the message names the repository and the cap."""


class GitFailed(Exception):
    """A git command of the pre-check failed; the message is safe to show (no remote's words)."""


@dataclass(frozen=True)
class Entry:
    mode: str
    kind: str  # "blob", "tree" or "commit" (a submodule: Harbor's checkout leaves an empty folder)
    oid: str
    path: str


@dataclass
class Commit:
    sha: str
    entries: dict[str, Entry]
    children: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, sha: str, entries: Iterable[Entry]) -> Commit:
        by_path = {e.path: e for e in entries}
        children: dict[str, list[str]] = {"": []}
        for path in by_path:
            children.setdefault(posixpath.dirname(path), []).append(path)
        for names in children.values():
            names.sort()
        return cls(sha, by_path, children)

    def under(self, root: str) -> list[Entry]:
        """Every entry below `root` ("" or "." for the whole commit), in path order."""
        if root in ("", "."):
            return [self.entries[p] for p in sorted(self.entries)]
        prefix = root + "/"
        return [self.entries[p] for p in sorted(self.entries) if p.startswith(prefix)]

    def matches_elsewhere(self, pattern: str) -> str | None:
        """A path outside `pattern`'s own folder that the sparse-checkout pattern also matches: a
        pattern without a slash matches that name at any depth (gitignore rules)."""
        if "/" in pattern or pattern in ("", "."):
            return None
        for path in sorted(self.entries):
            parts = path.split("/")
            if pattern in parts[1:]:
                return path
        return None


class Scratch:
    """One remote's commits (trees, and the blobs asked for) in a bare repository of our own."""

    def __init__(self, url: str, folder: Path, timeout: float = GIT_TIMEOUT_SEC) -> None:
        self.url = url
        self.folder = folder
        self.timeout = timeout
        self.commits: dict[str, Commit] = {}
        scheme = "file" if url.startswith("file://") else "ssh" if not url.startswith("https://") else "https"
        self.env = {
            **git_environment(dict(os.environ)),
            # Only the transport of the URL checked by the outbound policy or the source roots.
            "GIT_ALLOW_PROTOCOL": scheme,
            "GIT_DIR": str(folder),
            "GIT_NO_LAZY_FETCH": "1",
        }

    async def create(self) -> None:
        self.folder.mkdir(parents=True)
        # No template: no sample hooks, no info/exclude; the remote is a promisor for partial fetches.
        await self._git("init", "-q", "--bare", "--template=", "--", str(self.folder))
        await self._git("config", "--", "remote.origin.url", self.url)
        await self._git("config", "--", "remote.origin.promisor", "true")
        await self._git("config", "--", "remote.origin.partialclonefilter", "blob:none")
        await self._git("config", "--", "extensions.partialClone", "origin")

    async def commit(self, wanted: str | None, label: str) -> Commit:
        """The commit `wanted` names (None: the remote's HEAD), its trees fetched under a cap."""
        key = wanted or "HEAD"
        if key in self.commits:
            return self.commits[key]
        fetch = ("fetch", "-q", "--depth", "1", "--filter=blob:none", "--no-tags", "--", "origin", key)
        await self._fetch(fetch, None, TREES_MAX_BYTES, f"{label}: the trees of {key}")
        sha = (await self._git("rev-parse", "--verify", "--end-of-options", "FETCH_HEAD^{commit}")).strip()
        listing = await self._git("ls-tree", "-r", "-t", "-z", "--full-tree", "--end-of-options", sha)
        entries = []
        for record in listing.split("\0"):
            if not record:
                continue
            meta, _, path = record.partition("\t")
            mode, kind, oid = meta.split(" ")
            entries.append(Entry(mode, kind, oid, path))
        commit = Commit.of(sha, entries)
        self.commits[key] = self.commits[sha] = commit
        return commit

    async def missing(self, commit: Commit) -> set[str]:
        """The commit's objects not here; `--missing=print` lists them without fetching any."""
        listing = await self._git("rev-list", "--objects", "--missing=print", "--end-of-options", commit.sha)
        return {line[1:].strip() for line in listing.splitlines() if line.startswith("?")}

    async def fetch_blobs(self, commit: Commit, oids: set[str], extra: int, label: str) -> None:
        """The blobs of `oids` not here yet (a server without filters sent them with the trees)."""
        wanted = sorted(oids & await self.missing(commit))
        if not wanted:
            return
        fetch = (
            "-c", "fetch.negotiationAlgorithm=noop",
            "fetch", "-q", "--no-tags", "--no-write-fetch-head", "--recurse-submodules=no",
            "--filter=blob:none", "--stdin", "--", "origin",
        )  # fmt: skip
        await self._fetch(fetch, "\n".join(wanted).encode() + b"\n", extra, label)
        if oids & await self.missing(commit):
            # Reading a missing object would fetch it lazily, unbounded: refuse instead.
            raise GitFailed(f"{label}: the remote did not send every object asked for")

    async def sizes(self, oids: Iterable[str]) -> dict[str, int]:
        """Sizes from the object headers: git inflates none of them in full."""
        wanted = sorted(set(oids))
        if not wanted:
            return {}
        out = await self._git(
            "cat-file", "--batch-check=%(objectname) %(objectsize)", stdin="\n".join(wanted) + "\n"
        )
        sizes = {}
        for line in out.splitlines():
            oid, _, size = line.partition(" ")
            if size.isdigit():
                sizes[oid] = int(size)
        absent = [oid for oid in wanted if oid not in sizes]
        if absent:
            raise GitFailed(f"{len(absent)} objects of the commit did not arrive")
        return sizes

    async def blob(self, oid: str) -> bytes:
        return (await self._git("cat-file", "blob", "--", oid, raw=True)).encode("latin-1")

    async def _fetch(self, args: tuple[str, ...], stdin: bytes | None, extra: int, label: str) -> None:
        """git fetch, stopped as soon as it has written more than `extra` bytes into the repository."""
        cap = await asyncio.to_thread(_bytes_under, self.folder) + extra
        # Kept as the pack it arrives in: unpacked, a blob would be inflated in memory and rewritten.
        args = ("-c", "fetch.unpackLimit=1", *args)
        errors = self.folder.parent / f"{self.folder.name}.stderr"
        with errors.open("wb") as stderr:
            process = await asyncio.create_subprocess_exec(
                "git", *args,
                stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=stderr,
                env=self.env,
                start_new_session=True,
            )  # fmt: skip
            over = False
            try:
                async with asyncio.timeout(self.timeout):
                    if stdin is not None and process.stdin is not None:
                        # A git that exits before reading it says why in its exit status.
                        with contextlib.suppress(OSError):
                            process.stdin.write(stdin)
                            await process.stdin.drain()
                            process.stdin.close()
                    while True:
                        try:
                            await asyncio.wait_for(asyncio.shield(process.wait()), WATCH_INTERVAL_SEC)
                            break
                        except TimeoutError:
                            if await asyncio.to_thread(_bytes_under, self.folder) > cap:
                                over = True
                                break
            except TimeoutError:
                _kill(process)
                await process.wait()
                raise GitFailed(f"git did not finish within {self.timeout:.0f} s") from None
            finally:
                if process.returncode is None:
                    _kill(process)
                    await process.wait()
        if over or await asyncio.to_thread(_bytes_under, self.folder) > cap:
            await asyncio.to_thread(_drop_partial_packs, self.folder)
            raise GitTooLarge(f"{label}: more than {extra // _MIB} MiB while fetched")
        if process.returncode:
            raise GitFailed(self._reason(errors.read_bytes()))

    async def _git(self, *args: str, stdin: str | None = None, raw: bool = False) -> str:
        process = await asyncio.create_subprocess_exec(
            "git",
            *args,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self.env,
            start_new_session=True,
        )
        try:
            async with asyncio.timeout(self.timeout):
                out, err = await process.communicate(stdin.encode() if stdin is not None else None)
        except TimeoutError:
            _kill(process)
            await process.wait()
            raise GitFailed(f"git did not finish within {self.timeout:.0f} s") from None
        if process.returncode:
            raise GitFailed(self._reason(err))
        return out.decode("latin-1") if raw else out.decode(errors="replace")

    def _reason(self, stderr: bytes) -> str:
        # A remote's stderr is its own words (and tells an open port from a closed one): only the class.
        if not self.url.startswith("file://"):
            return UNREACHABLE
        lines = [ln.strip() for ln in stderr.decode(errors="replace").splitlines() if ln.strip()]
        lines = [ln for ln in lines if not ln.startswith("warning:")]
        return "; ".join(lines[:2]) or "git failed"


def _kill(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def _drop_partial_packs(folder: Path) -> None:
    """What a killed fetch left: its temporary pack and the objects of an unfinished one."""
    for leftover in [*folder.glob("objects/pack/tmp_*"), *folder.glob("objects/incoming-*")]:
        if leftover.is_dir():
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            leftover.unlink(missing_ok=True)


def _bytes_under(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            # git renames its temporary packs as it goes: a file gone in between is not counted.
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def remove(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    folder.parent.joinpath(f"{folder.name}.stderr").unlink(missing_ok=True)
