"""Whether this executor runs a job, hands it back for a host that can hold it, or ends its attempt
because no host can: a plain decision over what the task asks and what the live hosts announced.

A host too small for a task hands its job back (a NAK with a delay, worker.py) while some live host
announces enough, however busy that host is: the job waits for it. When none does, the job waits
REGATTA_CAPACITY_WAIT_SEC from its queueing for one to announce itself (a host starting, restarting),
then its attempt ends errored with what is missing, so a run never waits forever for a host nobody runs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from regatta_shared.events import TaskResources

from .capacity import HostCapacity, shortfall

# Hosts named at most in a refusal's reason.
_HOSTS_NAMED = 5


@dataclass(frozen=True)
class Placement:
    action: Literal["run", "hand_back", "refuse"]
    reason: str = ""


def place(
    asked: TaskResources,
    here: HostCapacity,
    hosts: Iterable[HostCapacity],
    waited_sec: float,
    wait_limit_sec: float,
    gone: Iterable[HostCapacity] = (),
) -> Placement:
    """`hosts`: the live announcements (this host's among them or not); `waited_sec`: since the job was
    queued; `gone`: hosts this executor saw announced within the last `wait_limit_sec` that are no
    longer (restarting, say): the job waits for them as for a host starting."""
    if not shortfall(asked, here):
        return Placement("run")
    live = {host.executor_id: host for host in hosts}
    live[here.executor_id] = here
    lacks = ", ".join(shortfall(asked, here))
    able = sorted(h.executor_id for h in live.values() if not shortfall(asked, h))
    if able:
        return Placement("hand_back", f"this host lacks {lacks}; {able[0]} has it")
    left = sorted(h.executor_id for h in gone if not shortfall(asked, h))
    if left:
        return Placement("hand_back", f"this host lacks {lacks}; {left[0]} had it and left recently")
    if waited_sec < wait_limit_sec:
        return Placement("hand_back", "no live executor host can hold it yet")
    return Placement("refuse", no_host_reason(asked, list(live.values()), wait_limit_sec))


def no_host_reason(asked: TaskResources, hosts: list[HostCapacity], waited_sec: float) -> str:
    """E.g. "no executor host has 4 CPUs (largest: 2 CPUs; hosts: a (2 CPUs, 2048 MiB memory, …))"."""
    wants: list[tuple[str, float, str]] = []
    if asked.cpus is not None:
        wants.append(("cpus", asked.cpus, "CPU"))
    if asked.memory_mb is not None:
        wants.append(("memory_mb", asked.memory_mb, "MiB of memory"))
    if asked.storage_mb is not None:
        wants.append(("storage_mb", asked.storage_mb, "MiB of storage"))
    # What no host has at all; when each is somewhere but never together, all of them at once.
    missing = [w for w in wants if all(not w[1] <= getattr(h, w[0]) for h in hosts)] or wants
    needs = " and ".join(_amount(value, unit) for _, value, unit in missing)
    largest = ", ".join(_amount(max(getattr(h, key) for h in hosts), unit) for key, _, unit in missing)
    named = sorted(hosts, key=lambda h: h.executor_id)
    listed = "; ".join(
        f"{h.executor_id} ({_amount(h.cpus, 'CPU')}, {h.memory_mb} MiB memory, {h.storage_mb} MiB storage)"
        for h in named[:_HOSTS_NAMED]
    )
    more = f"; {len(named) - _HOSTS_NAMED} more" if len(named) > _HOSTS_NAMED else ""
    return (
        f"no executor host has {needs} (largest: {largest}; hosts: {listed}{more}); "
        f"waited {_figure(round(waited_sec))} s for one to start"
    )


def _amount(value: float, unit: str) -> str:
    """ "1 CPU", "2 CPUs", "1.5 CPUs", "512 MiB of memory"."""
    if unit == "CPU" and value != 1:
        unit = "CPUs"
    return f"{_figure(value)} {unit}"


def _figure(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
