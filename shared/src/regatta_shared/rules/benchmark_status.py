"""A benchmark's sync status, once: its words, which of them mean a sync is under way and which that
it ended. The gateway's benchmark aggregate (commands/benchmark_decider.py) and its read model fold
the benchmark's events into them; run resolution, the live stream, the pages and their script
(Regatta.SYNCING, read from the page) test them by these names.
"""

from __future__ import annotations

from typing import Literal, get_args

SyncStatus = Literal["pending", "syncing", "ready", "failed"]
SYNC_STATUSES: tuple[SyncStatus, ...] = get_args(SyncStatus)

# Requested (or the benchmark just added), and not yet started by registry-sync.
PENDING: SyncStatus = "pending"
SYNCING: SyncStatus = "syncing"
READY: SyncStatus = "ready"
FAILED: SyncStatus = "failed"

# A sync is under way from its request until it completes or fails: no second one may start.
IN_PROGRESS: tuple[SyncStatus, ...] = (PENDING, SYNCING)
SETTLED: tuple[SyncStatus, ...] = (READY, FAILED)
