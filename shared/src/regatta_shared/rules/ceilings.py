"""Operator ceilings on what one task may ask for, and the bounds of a task's files.

A task.toml is the dataset author's: `memory_mb = 1048576` would otherwise become a 1 TiB memory limit
and a 1 TiB RAM-backed tmpfs on a 24 GiB host. Every value a task asks for is compared here, in the same
words, by registry-sync (the task is listed invalid), by the gateway at run submission (the ceilings
may have been lowered since the sync) and by the executor (defence in depth: refused, never clamped).

A ceiling the operator does not set is this host's own figure: memory and CPUs from its RAM and cores,
storage from the disk the sandboxes write on (sandbox_disk.py), which the message then names.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ..events import TaskResources
from ..settings import Settings
from .sandbox_disk import Disk, sandbox_disk_kept

_MIB = 1024 * 1024


def _physical_memory_mb() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // _MIB
    except (ValueError, OSError):
        return None


@dataclass(frozen=True)
class Ceiling:
    field: str  # the task.toml field the message names
    setting: str
    value: float
    measured: str | None = None
    """What the value is the size of, when it is this host's figure (in MiB) and not the setting's."""

    def exceeded(self) -> str:
        if self.measured is None:
            return f"the operator's ceiling of {_number(self.value)} ({self.setting})"
        return f"the {_number(self.value)} MiB of {self.measured} ({self.setting} sets another ceiling)"


# The expansion ratio applies past this many expanded bytes: a small task of repetitive text may
# compress 100:1 and harms nobody.
EXPANSION_FLOOR_BYTES = 16 * _MIB


@dataclass(frozen=True)
class TaskFileBounds:
    max_bytes: int
    max_files: int
    max_expansion: float

    @classmethod
    def from_settings(cls, settings: Settings) -> TaskFileBounds:
        return cls(settings.max_task_mb * _MIB, settings.max_task_files, settings.max_task_expansion)

    def over_expansion(self, expanded: int, compressed: int) -> bool:
        """The same rule at sync (the archive it builds) and in the executor (the archive it unpacks)."""
        return expanded > EXPANSION_FLOOR_BYTES and expanded > self.max_expansion * max(compressed, 1)


# TaskResources field -> (task.toml field, setting name, Settings attribute)
_FIELDS = {
    "memory_mb": ("[environment].memory_mb", "REGATTA_MAX_MEMORY_MB", "max_memory_mb"),
    "cpus": ("[environment].cpus", "REGATTA_MAX_CPUS", "max_cpus"),
    "storage_mb": ("[environment].storage_mb", "REGATTA_MAX_STORAGE_MB", "max_storage_mb"),
    "agent_timeout_sec": ("[agent].timeout_sec", "REGATTA_MAX_AGENT_TIMEOUT_SEC", "max_agent_timeout_sec"),
    "verifier_timeout_sec": (
        "[verifier].timeout_sec",
        "REGATTA_MAX_VERIFIER_TIMEOUT_SEC",
        "max_verifier_timeout_sec",
    ),
    "build_timeout_sec": (
        "[environment].build_timeout_sec",
        "REGATTA_MAX_BUILD_TIMEOUT_SEC",
        "max_build_timeout_sec",
    ),
}
_TIMEOUTS = ("agent_timeout_sec", "verifier_timeout_sec")


@dataclass(frozen=True)
class Ceilings:
    values: dict[str, Ceiling]
    max_processes: int

    @classmethod
    def from_settings(cls, settings: Settings, disk: Disk | None = None) -> Ceilings:
        """`disk`: the disk the sandboxes write a task's files on, the default ceiling on storage_mb;
        None where they keep them in memory (the `local` environment's tmpfs): half the RAM."""
        ram = _physical_memory_mb()
        derived: dict[str, float | None] = {
            # Three quarters of the RAM for one sandbox's memory.
            "max_memory_mb": ram * 3 // 4 if ram else 16_384,
            "max_cpus": float(os.cpu_count() or 1),
        }
        values = {}
        for key, (field, setting, attribute) in _FIELDS.items():
            value = getattr(settings, attribute)
            if value is None and attribute == "max_storage_mb":
                values[key] = _storage_ceiling(field, setting, disk, ram)
                continue
            if value is None:
                value = derived[attribute]
            values[key] = Ceiling(field, setting, float(value))  # type: ignore[arg-type]
        return cls(values, settings.max_processes)

    @classmethod
    def of_host(cls, settings: Settings, environment: str | None = None) -> Ceilings:
        """The ceilings with this host's sandbox disk measured, for `environment` (an executor's
        resolved one; else REGATTA_EXECUTOR_ENVIRONMENT, as registry-sync and the gateway know it)."""
        disk = None
        if settings.max_storage_mb is None:
            disk = sandbox_disk_kept(environment or settings.executor_environment, data_dir=settings.data_dir)
        return cls.from_settings(settings, disk)

    def violations(self, resources: TaskResources | None, timeout_multiplier: float = 1.0) -> list[str]:
        """Each value over its ceiling, in words naming the field, the value and the setting. Timeouts
        are compared as a run would use them (times the run's timeout multiplier)."""
        if resources is None:
            return []
        found = []
        for key, ceiling in self.values.items():
            asked = getattr(resources, key)
            if asked is None:
                continue
            effective = asked * timeout_multiplier if key in _TIMEOUTS else asked
            # NaN compares false to everything: a task.toml's `nan` is over every ceiling too.
            if effective > ceiling.value or effective != effective:
                scaled = key in _TIMEOUTS and timeout_multiplier != 1
                times = f" (x{timeout_multiplier:g} timeout multiplier)" if scaled else ""
                found.append(f"{ceiling.field} = {_number(asked)}{times} exceeds {ceiling.exceeded()}")
        return found


def _storage_ceiling(field: str, setting: str, disk: Disk | None, ram_mb: int | None) -> Ceiling:
    """Harbor's storage_mb is a disk request: the size of the disk the sandboxes write a task's files on.
    Where they keep them in memory instead (`local`: its root, /tests and log folders are tmpfs sized by
    storage_mb), half the RAM, as a tmpfs that outgrew it would take the host's memory."""
    if disk is not None:
        return Ceiling(field, setting, float(disk.mib), disk.what)
    if ram_mb is None:
        return Ceiling(field, setting, 16_384.0)
    return Ceiling(
        field,
        setting,
        float(ram_mb // 2),
        "half this host's memory, where the local sandbox keeps a task's files",
    )


def task_resources(config: Any) -> TaskResources:
    """The largest value a Harbor TaskConfig asks for, over its environment, its verifier's own
    environment and every step (a multi-step task's agent and verifier timeouts are per step)."""
    environments = [config.environment]
    if config.verifier.environment is not None:
        environments.append(config.verifier.environment)
    agents = [config.agent.timeout_sec]
    verifiers = [config.verifier.timeout_sec]
    for step in config.steps or ():
        agents.append(step.agent.timeout_sec)
        verifiers.append(step.verifier.timeout_sec)
        if step.verifier.environment is not None:
            environments.append(step.verifier.environment)
    return TaskResources(
        memory_mb=_largest(e.memory_mb for e in environments),
        cpus=_largest(e.cpus for e in environments),
        storage_mb=_largest(e.storage_mb for e in environments),
        agent_timeout_sec=_largest(agents),
        verifier_timeout_sec=_largest(verifiers),
        build_timeout_sec=_largest(e.build_timeout_sec for e in environments),
    )


def _largest(values: Any) -> Any:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
