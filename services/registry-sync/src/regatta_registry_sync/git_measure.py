"""A task's files measured from a commit's trees and blob sizes as Harbor's checkout would copy them
(git_bounds.py): a relative link inside the task is replaced by what it names, so a link to a folder
counts that folder again; refused with the file or count that passes a bound, and the setting."""

from __future__ import annotations

import posixpath

from regatta_shared.rules.ceilings import TaskFileBounds

from regatta_registry_sync.git_scratch import Commit
from regatta_registry_sync.task_bounds import human_size

_MIB = 1024 * 1024
MAX_LINK_HOPS = 40


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
