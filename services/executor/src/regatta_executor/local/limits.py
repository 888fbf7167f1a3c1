"""Resource limits of a sandbox: cgroup leaves for memory, CPU bandwidth and the number of processes
(without a usable pids or memory cgroup, sandbox.py falls back to RLIMIT_NPROC and RLIMIT_AS).

Works with a unified (v2) hierarchy, legacy (v1) per-controller hierarchies, or a hybrid of both. Leaves
are created *below the executor's own cgroup* in every hierarchy, so whatever limits the executor itself
runs under keep applying to its sandboxes and the executor never moves processes it does not own.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

_CONTROLLERS = ("pids", "memory", "cpu")
_CFS_PERIOD_US = 100_000

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Limits:
    memory_bytes: int | None = None
    cpus: float | None = None
    max_processes: int | None = None


@dataclass(frozen=True)
class _Hierarchy:
    version: int
    directory: Path
    controllers: frozenset[str]


def _own_cgroups() -> dict[frozenset[str], str]:
    own: dict[frozenset[str], str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        own[frozenset(controllers.split(",")) if controllers else frozenset()] = path
    return own


def _mounts() -> list[tuple[str, Path, str, set[str]]]:
    """(filesystem type, mount point, root inside the hierarchy, super options) of every cgroup mount."""
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if tail and tail[0] in ("cgroup", "cgroup2"):
            options = set(tail[2].split(",")) if len(tail) > 2 else set()
            mounts.append((tail[0], Path(fields[4]), fields[3], options))
    return mounts


def _inside(own_path: str, mount_root: str) -> str | None:
    own, root = Path(own_path), Path(mount_root)
    return str(own.relative_to(root)) if own.is_relative_to(root) else None


@functools.cache
def _hierarchies() -> tuple[_Hierarchy, ...]:
    """The hierarchies usable for sandbox leaves, each at the executor's own cgroup."""
    try:
        own, mounts = _own_cgroups(), _mounts()
    except OSError:
        return ()
    found: list[_Hierarchy] = []
    seen: set[Path] = set()
    for fstype, mount_point, mount_root, options in mounts:
        if fstype == "cgroup2":
            rel = _inside(own.get(frozenset(), "/"), mount_root)
            if rel is None:
                continue
            directory = (mount_point / rel).resolve()
            wanted = _enable_v2_controllers(directory)
            hierarchy = _Hierarchy(2, directory, wanted)
        else:
            key = next((k for k in own if k and k <= options), None)
            rel = _inside(own[key], mount_root) if key else None
            if key is None or rel is None:
                continue
            directory = (mount_point / rel).resolve()
            hierarchy = _Hierarchy(1, directory, frozenset(key) & frozenset(_CONTROLLERS))
        if directory in seen or not os.access(directory, os.W_OK):
            continue
        seen.add(directory)
        found.append(hierarchy)
    return tuple(found)


def leaf_parents() -> list[Path]:
    """The cgroup folders (the executor's own cgroups) that sandbox leaves are created in."""
    return [hierarchy.directory for hierarchy in _hierarchies()]


def _enable_v2_controllers(directory: Path) -> frozenset[str]:
    """Delegate the wanted controllers to child cgroups. v2 refuses this in a non-root cgroup that
    holds processes itself (an executor at the root of a container's cgroup namespace, typically);
    the limits then come from v1 hierarchies or the fallbacks."""
    try:
        available = set((directory / "cgroup.controllers").read_text().split())
        enabled = set((directory / "cgroup.subtree_control").read_text().split()) & set(_CONTROLLERS)
    except OSError:
        return frozenset()
    for controller in _CONTROLLERS:
        if controller not in available or controller in enabled:
            continue
        try:
            (directory / "cgroup.subtree_control").write_text(f"+{controller}")
            enabled.add(controller)
        except OSError:
            continue
    return frozenset(enabled)


def _write(path: Path, value: str) -> bool:
    try:
        path.write_text(value)
        return True
    except OSError:
        return False


class CgroupLeaf:
    """One sandbox's cgroups: one leaf per usable hierarchy, with the limits each hierarchy can enforce."""

    def __init__(self, leaves: list[tuple[_Hierarchy, Path]], enforced: frozenset[str]) -> None:
        self._leaves = leaves
        self._pids_max: int | None = None
        self.enforced = enforced
        """Subset of {"pids", "memory", "cpu"} actually enforced by these cgroups."""

    @classmethod
    def create(cls, name: str, limits: Limits) -> CgroupLeaf | None:
        leaves: list[tuple[_Hierarchy, Path]] = []
        enforced: set[str] = set()
        for hierarchy in _hierarchies():
            wanted = frozenset(c for c in hierarchy.controllers - enforced if _requested(c, limits))
            if not wanted:
                continue
            leaf = hierarchy.directory / name
            try:
                leaf.mkdir()
            except OSError as exc:
                logger.debug("cannot create cgroup %s: %s", leaf, exc)
                continue
            applied = _apply(hierarchy.version, leaf, wanted, limits)
            if applied:
                leaves.append((hierarchy, leaf))
                enforced |= applied
            else:
                leaf.rmdir()
        return cls(leaves, frozenset(enforced)) if leaves else None

    @classmethod
    def discard(cls, name: str) -> None:
        """Kill whatever is left in the leaves called `name` and remove them."""
        leaves = [(h, h.directory / name) for h in _hierarchies() if (h.directory / name).is_dir()]
        cls(leaves, frozenset()).remove()

    @property
    def procs_files(self) -> list[Path]:
        return [leaf / "cgroup.procs" for _, leaf in self._leaves]

    def pids(self) -> set[int]:
        found: set[int] = set()
        for path in self.procs_files:
            with contextlib.suppress(OSError):
                found.update(int(pid) for pid in path.read_text().split())
        return found

    def saturated(self, reserve: int) -> bool:
        """Whether fewer than `reserve` processes can still be started inside the sandbox."""
        for hierarchy, leaf in self._leaves:
            if "pids" not in hierarchy.controllers:
                continue
            try:
                if self._pids_max is None:
                    limit = (leaf / "pids.max").read_text().strip()
                    self._pids_max = -1 if limit == "max" else int(limit)
                current = int((leaf / "pids.current").read_text())
            except (OSError, ValueError):
                return False
            return self._pids_max >= 0 and current >= self._pids_max - reserve
        return False

    def kill(self, *, spare: frozenset[int] = frozenset(), deadline_sec: float = 2.0) -> None:
        """SIGKILL every process in the leaves except `spare`, repeating until none is left, because a
        process may fork between reading cgroup.procs and its signal."""
        if not spare:
            for _, leaf in self._leaves:
                _write(leaf / "cgroup.kill", "1")
        deadline = time.monotonic() + deadline_sec
        while (victims := self.pids() - spare) and time.monotonic() < deadline:
            for pid in victims:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)

    def remove(self, deadline_sec: float = 2.0) -> None:
        """rmdir every leaf; exiting processes keep a leaf busy for a moment, hence the retries."""
        deadline = time.monotonic() + deadline_sec
        for _, leaf in self._leaves:
            while True:
                try:
                    leaf.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if time.monotonic() > deadline:
                        logger.warning("cannot remove cgroup %s: %s", leaf, exc)
                        break
                    self.kill(deadline_sec=0.1)
                    time.sleep(0.02)


def _requested(controller: str, limits: Limits) -> bool:
    value = {"pids": limits.max_processes, "memory": limits.memory_bytes, "cpu": limits.cpus}[controller]
    return value is not None


def _apply(version: int, leaf: Path, controllers: frozenset[str], limits: Limits) -> set[str]:
    enforced: set[str] = set()
    pids = limits.max_processes
    if "pids" in controllers and pids is not None and _write(leaf / "pids.max", str(pids)):
        enforced.add("pids")
    if "memory" in controllers and limits.memory_bytes is not None:
        memory = str(limits.memory_bytes)
        if version == 2:
            ok = _write(leaf / "memory.max", memory)
            _write(leaf / "memory.swap.max", "0")
        else:
            ok = _write(leaf / "memory.limit_in_bytes", memory)
            _write(leaf / "memory.memsw.limit_in_bytes", memory)
        if ok:
            enforced.add("memory")
    if "cpu" in controllers and limits.cpus is not None:
        quota = max(1000, int(limits.cpus * _CFS_PERIOD_US))
        if version == 2:
            ok = _write(leaf / "cpu.max", f"{quota} {_CFS_PERIOD_US}")
        else:
            ok = _write(leaf / "cpu.cfs_period_us", str(_CFS_PERIOD_US)) and _write(
                leaf / "cpu.cfs_quota_us", str(quota)
            )
        if ok:
            enforced.add("cpu")
    return enforced
