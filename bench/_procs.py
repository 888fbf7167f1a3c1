"""What /proc says of a process and its descendants: resident memory and CPU time (Linux only)."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children, grandchildren, ...), from /proc/<pid>/task/*/children."""
    found: list[int] = []
    pending = [pid]
    while pending:
        parent = pending.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
            found += children
            pending += children
    return found


def rss_kb(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) in kB of one process; (0, 0) once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0, 0
    values = dict(re.findall(r"^(VmRSS|VmHWM):\s+(\d+) kB", status, re.M))
    return int(values.get("VmRSS", 0)), int(values.get("VmHWM", 0))


def family_rss_mb(pid: int) -> float:
    """Resident size of a process and its descendants (uvicorn workers, say), in MB."""
    return sum(rss_kb(member)[0] for member in (pid, *descendants(pid))) / 1024


def family_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and its descendants."""
    total = 0.0
    for member in (pid, *descendants(pid)):
        try:
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def machine_busy_seconds() -> float:
    """CPU time the whole machine spent busy since boot (all CPUs, /proc/stat minus idle and iowait):
    what a workload costs including processes that exit before they could be sampled (sandboxes)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(values) - values[3] - values[4]) / os.sysconf("SC_CLK_TCK")


def cpu_by_command(pid: int, names: Sequence[str]) -> dict[str, float]:
    """CPU seconds (with reaped children) of `pid`'s descendants, summed by the first of `names` found
    in each one's command line ("other" for the rest)."""
    found: dict[str, float] = {}
    for member in descendants(pid):
        try:
            command = Path(f"/proc/{member}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        name = next((n for n in names if n in command), "other")
        found[name] = found.get(name, 0.0) + sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    return found
