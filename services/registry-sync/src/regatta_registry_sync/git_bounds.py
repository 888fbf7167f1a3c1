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
from dataclasses import dataclass
from pathlib import Path

from harbor.models.task.id import GitTaskId, normalize_git_task_path
from regatta_shared.rules.ceilings import TaskFileBounds

from regatta_registry_sync.git_measure import TaskMeasure, TaskRefused, count_problem
from regatta_registry_sync.git_scratch import Commit, Entry, GitFailed, GitTooLarge, Scratch, remove
from regatta_registry_sync.task_bounds import human_size

_MIB = 1024 * 1024
# Pack headers, deltas against nothing, and the trees already there.
FETCH_SLACK_BYTES = 16 * _MIB
# Longer than any path a file system accepts: such a link cannot point inside the task.
MAX_LINK_TARGET = 4096
# Harbor hands task paths to `git sparse-checkout set --no-cone`, which reads them as gitignore patterns.
_PATTERN_CHARS = frozenset("*?[\\")


def pattern_problem(path: str) -> str | None:
    """Why `path` is not a literal path to Harbor's sparse checkout, which reads it as a pattern."""
    if any(c in _PATTERN_CHARS for c in path) or path.startswith(("!", "#")) or path != path.strip():
        return "has characters Harbor's sparse checkout reads as a pattern (* ? [ \\ ! # or spaces)"
    return None


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
