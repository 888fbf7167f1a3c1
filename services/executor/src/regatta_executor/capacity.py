"""What one executor host offers attempts: CPUs, memory and storage, measured from the host and
optionally declared lower by the operator (REGATTA_EXECUTOR_CPUS, REGATTA_EXECUTOR_MEMORY_MB).

What is measured is the machine the sandboxes run on (sandbox_host_figures). A declaration above it is
refused at start: a host that claims 4 CPUs on 2 cores would
take 4-CPU tasks the operator meant for another host and run them at half speed. The storage figure is
the executor's storage ceiling (task_ceilings.executor_ceilings), which already measures the disk its
sandboxes write on.
"""

from __future__ import annotations

import math
import os
import socket
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field
from regatta_shared.ceilings import Ceilings
from regatta_shared.events import TaskResources
from regatta_shared.settings import Settings

_MIB = 1024 * 1024
_CGROUP_ROOT = Path("/sys/fs/cgroup")


class CapacityError(ValueError):
    """A declared capacity the host does not have."""


class HostCapacity(BaseModel):
    """One executor's announcement (hosts.py): what an attempt on it may use."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    executor_id: str = Field(max_length=300)
    host: str = Field(max_length=255)
    environment: str = Field(max_length=300)
    slots: int = Field(ge=1, le=100_000)
    cpus: float = Field(gt=0, le=1_000_000)
    memory_mb: int = Field(ge=0)
    storage_mb: int = Field(ge=0)


def _own_cgroup_files(v2_name: str, v1_controller: str, v1_name: str) -> list[Path]:
    """Where this process's cgroup (v2 unified, or the v1 hierarchy of `v1_controller`) keeps a file."""
    found = []
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        relative = path.lstrip("/")
        if controllers == "":
            found.append(_CGROUP_ROOT / relative / v2_name)
        elif v1_controller in controllers.split(","):
            found.append(_CGROUP_ROOT / controllers / relative / v1_name)
            found.append(_CGROUP_ROOT / v1_controller / relative / v1_name)
    return found


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def measured_cpus() -> float:
    """The CPUs this process may run on, and its cgroup's CPU quota if lower."""
    try:
        cpus = float(len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        cpus = float(os.cpu_count() or 1)
    for path in _own_cgroup_files("cpu.max", "cpu", "cpu.cfs_quota_us"):
        text = _read(path)
        if not text:
            continue
        parts = text.split()
        if path.name == "cpu.max" and len(parts) == 2 and parts[0] != "max":
            cpus = min(cpus, int(parts[0]) / int(parts[1]))
        elif path.name == "cpu.cfs_quota_us" and parts[0].lstrip("-").isdigit() and int(parts[0]) > 0:
            period = _read(path.with_name("cpu.cfs_period_us"))
            if period and period.isdigit() and int(period) > 0:
                cpus = min(cpus, int(parts[0]) / int(period))
    return cpus


def measured_memory_mb() -> int:
    """The host's RAM, and its cgroup's memory limit if lower."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // _MIB
    except (ValueError, OSError):
        memory = 16_384
    for path in _own_cgroup_files("memory.max", "memory", "memory.limit_in_bytes"):
        text = _read(path)
        if text and text.isdigit():
            memory = min(memory, int(text) // _MIB)
    return memory


def sandbox_host_figures(environment: str, runs_on_host: bool, ceilings: Ceilings) -> tuple[float, int]:
    """(CPUs, memory MiB) of the machine the sandboxes run on: this host for one that runs here
    (`local`); the engine's (its NCPU and MemTotal, DOCKER_HOST's engine may be another host) for
    `container`; for a sandbox elsewhere (Harbor's cloud providers) the operator's ceilings, which
    this executor enforces on every task anyway."""
    if runs_on_host:
        return measured_cpus(), measured_memory_mb()
    if environment == "container":
        from .container.engine import client

        try:
            info = client().info()
            return float(info["NCPU"]), int(info["MemTotal"]) // _MIB
        except Exception:  # the engine not answering now: this host's figures, as for a local engine
            return measured_cpus(), measured_memory_mb()
    return ceilings.values["cpus"].value, int(ceilings.values["memory_mb"].value)


def host_capacity(
    settings: Settings,
    ceilings: Ceilings,
    executor_id: str,
    environment: str,
    runs_on_host: bool = True,
    cpus: float | None = None,
    memory_mb: int | None = None,
) -> HostCapacity:
    """This host's capacity: the measured figures (sandbox_host_figures; `cpus`, `memory_mb` given: a
    test's), lowered to the operator's declaration; CapacityError naming the setting when it declares
    more than there is."""
    if cpus is None or memory_mb is None:
        measured = sandbox_host_figures(environment, runs_on_host, ceilings)
        cpus = measured[0] if cpus is None else cpus
        memory_mb = measured[1] if memory_mb is None else memory_mb
    declared_cpus, declared_memory = settings.executor_cpus, settings.executor_memory_mb
    if declared_cpus is not None:
        if declared_cpus > cpus:
            raise CapacityError(
                f"REGATTA_EXECUTOR_CPUS = {declared_cpus:g} is more than this host has ({cpus:g} CPUs)"
            )
        cpus = declared_cpus
    if declared_memory is not None:
        if declared_memory > memory_mb:
            raise CapacityError(
                f"REGATTA_EXECUTOR_MEMORY_MB = {declared_memory} is more than this host has ({memory_mb} MiB)"
            )
        memory_mb = declared_memory
    storage = ceilings.values["storage_mb"].value
    return HostCapacity(
        executor_id=executor_id[:300],
        host=socket.gethostname()[:255],
        environment=environment[:300],
        slots=settings.executor_slots,
        cpus=cpus,
        memory_mb=memory_mb,
        storage_mb=int(storage) if math.isfinite(storage) else 0,
    )


def shortfall(asked: TaskResources, host: HostCapacity) -> list[str]:
    """What `host` lacks for a task asking `asked`, in words ("4 CPUs (has 2)"); empty when it fits."""
    lacks = []
    if asked.cpus is not None and not asked.cpus <= host.cpus:
        lacks.append(f"{_count(asked.cpus)} CPUs (has {_count(host.cpus)})")
    if asked.memory_mb is not None and not asked.memory_mb <= host.memory_mb:
        lacks.append(f"{asked.memory_mb} MiB of memory (has {host.memory_mb})")
    if asked.storage_mb is not None and not asked.storage_mb <= host.storage_mb:
        lacks.append(f"{asked.storage_mb} MiB of storage (has {host.storage_mb})")
    return lacks


def _count(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
