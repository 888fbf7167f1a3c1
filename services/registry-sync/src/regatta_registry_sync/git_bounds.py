"""Git tasks bounded before Harbor checks them out.

Harbor's task client clones a repository and checks each task's folder out in full: a 1 GiB file of
zeros is a few KB in a git pack, and 100,000 tiny files or a chain of links to folders (Harbor copies a
link's target) expand just as far, all before our bounds on the task's files could apply. So each
commit is first read here, into a repository of our own under the sync's working folder:

1. its trees only (`--filter=blob:none`, or, from a server without filters, whatever it sends), under a
   byte cap while git writes them. Every task's entries are counted from the trees alone;
2. the blobs of the tasks still within the count (links' targets included), under a byte cap of the
   bounds times the tasks; their sizes come from the object headers (`cat-file --batch-check`), so
   nothing is ever expanded: the folder holds git's compressed objects only;
3. each task measured as Harbor would copy it (a link to a folder counts that folder again), and refused
   with the file or count that passes a bound, and the setting.

A task that passes is handed to Harbor pinned to the commit measured here, so a ref that moves in
between cannot bring other content. Every git process here runs with only the URL's own transport
allowed, no hooks, no credential helper, no prompt, a timeout, and its arguments after `--`.
"""

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

from harbor.models.task.id import GitTaskId, normalize_git_task_path
from regatta_shared.rules.ceilings import TaskFileBounds
from regatta_shared.security.git_values import git_environment
from regatta_shared.security.outbound import UNREACHABLE

from regatta_registry_sync.task_bounds import human_size

_MIB = 1024 * 1024
# The trees of one commit: a repository of a million files has trees of a few tens of MiB.
TREES_MAX_BYTES = 64 * _MIB
# Pack headers, deltas against nothing, and the trees already there.
FETCH_SLACK_BYTES = 16 * _MIB
# Longer than any path a file system accepts: such a link cannot point inside the task.
MAX_LINK_TARGET = 4096
MAX_LINK_HOPS = 40
WATCH_INTERVAL_SEC = 0.2
GIT_TIMEOUT_SEC = 600.0
# Harbor hands task paths to `git sparse-checkout set --no-cone`, which reads them as gitignore patterns.
_PATTERN_CHARS = frozenset("*?[\\")


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


def pattern_problem(path: str) -> str | None:
    """Why `path` is not a literal path to Harbor's sparse checkout, which reads it as a pattern."""
    if any(c in _PATTERN_CHARS for c in path) or path.startswith(("!", "#")) or path != path.strip():
        return "has characters Harbor's sparse checkout reads as a pattern (* ? [ \\ ! # or spaces)"
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


class TaskRefused(Exception):
    """The task's files, as Harbor would check them out, pass a bound (or cannot be checked out)."""


def count_problem(name: str, commit: Commit, root: str, bounds: TaskFileBounds) -> str | None:
    """From the trees alone: a task with more entries than the bound is refused before any blob."""
    entries = commit.under(root)
    if len(entries) > bounds.max_files:
        return f"task {name!r}: more than {bounds.max_files} files and folders (REGATTA_MAX_TASK_FILES)"
    return None


class TaskMeasure:
    """A task's bytes and entry count as Harbor's copy materializes it: a relative link inside the task
    is replaced by what it names, so a link to a folder counts the folder once more. Sums are memoized
    per real folder, so a chain of links doubling at each level costs a walk of the tree, not 2**n."""

    def __init__(
        self, name: str, commit: Commit, root: str, sizes: dict[str, int], links: dict[str, str]
    ) -> None:
        self.name = name
        self.commit = commit
        self.root = "" if root in ("", ".") else root
        self.sizes = sizes
        self.links = links
        self.memo: dict[str, tuple[int, int]] = {}

    def _relative(self, path: str) -> str:
        return path[len(self.root) + 1 :] if self.root else path

    def resolve(self, path: str) -> str:
        """The real path in the commit that `path` names, following links at every component."""
        hops = 0
        parts = self._relative(path).split("/")
        done: list[str] = []
        while parts:
            part = parts.pop(0)
            if part in ("", "."):
                continue
            if part == "..":
                if not done:
                    raise TaskRefused(f"task {self.name!r}: a link leaves the task ({path})")
                done.pop()
                continue
            current = "/".join(filter(None, [self.root, *done, part]))
            entry = self.commit.entries.get(current)
            if entry is None:
                raise TaskRefused(f"task {self.name!r}: a link names nothing in the task ({path})")
            if entry.mode == "120000":
                hops += 1
                target = self.links[entry.oid]
                if hops > MAX_LINK_HOPS or target.startswith("/"):
                    raise TaskRefused(f"task {self.name!r}: links must be relative and resolve ({path})")
                parts = target.split("/") + parts
                continue
            done.append(part)
        return "/".join(filter(None, [self.root, *done]))

    def measure(self, path: str, active: frozenset[str] = frozenset()) -> tuple[int, int]:
        """(bytes, entries) of `path` as copied; a folder counts itself and everything in it."""
        real = self.resolve(path) if self.commit.entries[path].mode == "120000" else path
        entry = self.commit.entries.get(real)
        if entry is None or entry.kind != "tree":
            return (self.sizes.get(entry.oid, 0) if entry and entry.kind == "blob" else 0), 1
        if real in active:
            raise TaskRefused(f"task {self.name!r}: a link makes a cycle ({path})")
        if real not in self.memo:
            size, count = 0, 1
            inner = active | {real}
            for child in self.commit.children.get(real, []):
                child_size, child_count = self.measure(child, inner)
                size, count = size + child_size, count + child_count
            self.memo[real] = (size, count)
        return self.memo[real]

    def check(self, bounds: TaskFileBounds) -> None:
        total = 0
        entries = 0
        folder = self.root
        shown = ""
        while True:
            descend = None
            for child in self.commit.children.get(folder, []):
                size, count = self.measure(child)
                entries += count
                if entries > bounds.max_files:
                    raise TaskRefused(
                        f"task {self.name!r}: more than {bounds.max_files} files and folders "
                        "(REGATTA_MAX_TASK_FILES)"
                    )
                if total + size > bounds.max_bytes:
                    name = posixpath.join(shown, posixpath.basename(child))
                    entry = self.commit.entries[child]
                    real = self.resolve(child) if entry.mode == "120000" else child
                    if self.commit.entries[real].kind == "tree":
                        descend = (real, name)
                        entries -= count
                        break
                    raise TaskRefused(
                        f"task {self.name!r}: its files pass {bounds.max_bytes // _MIB} MiB at {name} "
                        f"({human_size(size)}) (REGATTA_MAX_TASK_MB)"
                    )
                total += size
            if descend is None:
                return
            folder, shown = descend
            entries += 1


def remove(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    folder.parent.joinpath(f"{folder.name}.stderr").unlink(missing_ok=True)


@dataclass(frozen=True)
class GitTask:
    name: str
    task_id: GitTaskId


async def bound_git_tasks(
    tasks: list[GitTask], workdir: Path, bounds: TaskFileBounds
) -> list[GitTaskId | str]:
    """Each task pinned to the commit measured, or the reason it is refused. A repository whose trees
    pass their cap, or that git cannot read, raises GitTooLarge or GitFailed (the sync fails)."""
    results: list[GitTaskId | str] = ["" for _ in tasks]
    by_url: dict[str, list[int]] = {}
    for index, task in enumerate(tasks):
        by_url.setdefault(task.task_id.git_url or "", []).append(index)
    for number, (url, indexes) in enumerate(by_url.items()):
        scratch = Scratch(url, workdir / "git-check" / str(number))
        label = f"git repository {url}"
        try:
            await scratch.create()
            # Harbor's clone fetches the trees of the default branch before the commit it checks out.
            await scratch.commit(None, label)
            survivors: dict[str, list[tuple[int, str]]] = {}
            for index in indexes:
                task = tasks[index]
                commit = await scratch.commit(task.task_id.git_commit_id, label)
                root = normalize_git_task_path(task.task_id.path).as_posix()
                problem = _structure_problem(task.name, commit, root) or count_problem(
                    task.name, commit, root, bounds
                )
                if problem:
                    results[index] = problem
                else:
                    survivors.setdefault(commit.sha, []).append((index, root))
            for sha, group in survivors.items():
                commit = scratch.commits[sha]
                for index, outcome in await _measure_group(scratch, commit, tasks, group, bounds, label):
                    results[index] = (
                        outcome
                        if isinstance(outcome, str)
                        else GitTaskId(git_url=url, git_commit_id=sha, path=tasks[index].task_id.path)
                    )
        except GitFailed as error:
            raise GitFailed(f"{label}: {error}") from None
        finally:
            await asyncio.to_thread(remove, scratch.folder)
    return results


async def bound_paths(scratch: Scratch, commit: Commit, patterns: list[str], cap: int, what: str) -> None:
    """The files Harbor's sparse checkout of `patterns` writes (a pattern without a slash matches at
    any depth) stay within `cap` bytes, or GitTooLarge names `what` and the cap."""
    matched: dict[str, Entry] = {}
    for pattern in patterns:
        for path, entry in commit.entries.items():
            parts = path.split("/")
            inside = path == pattern or path.startswith(pattern + "/")
            anywhere = "/" not in pattern and pattern in parts
            if (inside or anywhere) and entry.kind == "blob":
                matched[path] = entry
    oids = {e.oid for e in matched.values()}
    await scratch.fetch_blobs(commit, oids, cap + FETCH_SLACK_BYTES, what)
    sizes = await scratch.sizes(oids)
    total = sum(sizes.get(e.oid, 0) for e in matched.values())
    if total > cap:
        raise GitTooLarge(f"{what}: the files it matches pass {cap // _MIB} MiB ({human_size(total)})")


def _structure_problem(name: str, commit: Commit, root: str) -> str | None:
    problem = pattern_problem(root)
    if problem:
        return f"task {name!r}: its path {root!r} {problem}"
    if root in ("", "."):
        return f"task {name!r}: its path must name a folder inside the repository"
    parts = root.split("/")
    for depth in range(1, len(parts) + 1):
        entry = commit.entries.get("/".join(parts[:depth]))
        if entry is None or (depth < len(parts) and entry.kind != "tree" and entry.mode != "120000"):
            return f"task {name!r}: {root} is not a folder at commit {commit.sha[:12]}"
        if entry.mode == "120000":
            return f"task {name!r}: its path goes through a link ({'/'.join(parts[:depth])})"
        if depth == len(parts) and entry.kind != "tree":
            return f"task {name!r}: {root} is not a folder at commit {commit.sha[:12]}"
    elsewhere = commit.matches_elsewhere(root)
    if elsewhere:
        return (
            f"task {name!r}: its path {root!r} also matches {elsewhere}, which Harbor's sparse "
            "checkout would check out too"
        )
    return None


async def _measure_group(
    scratch: Scratch,
    commit: Commit,
    tasks: list[GitTask],
    group: list[tuple[int, str]],
    bounds: TaskFileBounds,
    label: str,
) -> list[tuple[int, str | None]]:
    def blobs(root: str) -> set[str]:
        return {e.oid for e in commit.under(root) if e.kind == "blob"}

    outcomes: list[tuple[int, str | None]] = []
    fetched: list[tuple[int, str]] = []
    over = f"its files pass {bounds.max_bytes // _MIB} MiB while fetched (REGATTA_MAX_TASK_MB)"
    try:
        wanted = set().union(*(blobs(root) for _, root in group))
        extra = len(group) * bounds.max_bytes + FETCH_SLACK_BYTES
        await scratch.fetch_blobs(commit, wanted, extra, f"{label}: the tasks' files")
        fetched = group
    except GitTooLarge:
        if len(group) == 1:
            return [(group[0][0], f"task {tasks[group[0][0]].name!r}: {over}")]
        # One fetch for all is the common case; task by task names the one that passes its bound.
        for index, root in group:
            try:
                extra = bounds.max_bytes + FETCH_SLACK_BYTES
                await scratch.fetch_blobs(commit, blobs(root), extra, f"{label}: task {root}")
                fetched.append((index, root))
            except GitTooLarge:
                outcomes.append((index, f"task {tasks[index].name!r}: {over}"))
    for index, root in fetched:
        name = tasks[index].name
        try:
            sizes = await scratch.sizes(blobs(root))
            links = {}
            for entry in commit.under(root):
                if entry.mode == "120000":
                    if sizes[entry.oid] > MAX_LINK_TARGET:
                        raise TaskRefused(f"task {name!r}: a link's target is too long ({entry.path})")
                    links[entry.oid] = (await scratch.blob(entry.oid)).decode(errors="replace")
            TaskMeasure(name, commit, root, sizes, links).check(bounds)
            outcomes.append((index, None))
        except TaskRefused as refused:
            outcomes.append((index, str(refused)))
    return outcomes
