"""What /proc says of a process and its descendants: resident memory and CPU time (Linux only)."""

from __future__ import annotations

import os
import re
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
