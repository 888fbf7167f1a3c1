"""Processes a test started, found through its own stack: the descendants of the processes it launched.

Tests never look for processes by name across the machine: another test, a demo stack or a person may run
bwrap or `sleep 30` at the same time, and a match on those would fail (or pass) for the wrong reason.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple


class Process(NamedTuple):
    name: str  # the executable's name (comm), e.g. "bwrap" however it was invoked
    command: str  # the command line, arguments joined by spaces


def _parents() -> dict[int, tuple[int, str]]:
    """pid → (parent pid, name) of every process visible now (read only to walk down from our own)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # ended meanwhile
        # The command name may hold spaces and parentheses: the fields after the last ')' are fixed.
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        parents[int(entry)] = (int(stat[stat.rindex(")") + 2 :].split()[1]), name)
    return parents


def _command(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return None


def descendants(roots: Iterable[int]) -> dict[int, Process]:
    """Every live process below `roots` (not the roots themselves)."""
    table = _parents()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    found: dict[int, Process] = {}
    stack = [child for root in roots for child in children.get(root, [])]
    while stack:
        pid = stack.pop()
        command = _command(pid)
        if command is not None:
            found[pid] = Process(table[pid][1], command)
        stack.extend(children.get(pid, []))
    return found
