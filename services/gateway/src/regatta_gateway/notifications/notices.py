"""Which events notify whom, and the signed payload. Pure functions."""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Any

from regatta_shared.events import BenchmarkSyncFailed, RunFailed, RunFinished, RunStopped
from regatta_shared.eventstore import StoredEvent

KINDS = ("run.finished", "run.failed", "run.stopped", "benchmark.sync_failed", "budget.reached")
EVENT_KINDS = {
    RunFinished.type_name: "run.finished",
    RunFailed.type_name: "run.failed",
    RunStopped.type_name: "run.stopped",
    BenchmarkSyncFailed.type_name: "benchmark.sync_failed",
}
SIGNATURE_HEADER = "X-Regatta-Signature"


@dataclass(frozen=True)
class Notice:
    notification_id: str
    kind: str
    workspace_id: str
    payload: dict[str, Any]


def notice_for(event: StoredEvent, workspace_id: str, subject: dict[str, Any]) -> Notice | None:
    kind = EVENT_KINDS.get(event.type)
    if kind is None:
        return None
    payload = {
        "id": event.event_id,
        "kind": kind,
        "workspace_id": workspace_id,
        "occurred_at": event.recorded_at.isoformat(),
        "data": {
            **subject,
            **{k: v for k, v in event.data.items() if k in ("run_id", "benchmark_id", "reason")},
        },
    }
    return Notice(event.event_id, kind, workspace_id, payload)


def body_of(notice: Notice) -> bytes:
    return json.dumps(notice.payload, sort_keys=True, separators=(",", ":")).encode()


def signature(key: bytes, timestamp: int, body: bytes) -> str:
    """`t=<unix>,v1=<hex hmac-sha256 of "<t>.<body>">`: the timestamp is signed so replays can be refused."""
    digest = hmac.new(key, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def verify(key: bytes, header: str, body: bytes) -> bool:
    parts = dict(item.split("=", 1) for item in header.split(",") if "=" in item)
    expected = signature(key, int(parts.get("t", "0")), body)
    return hmac.compare_digest(expected, header)


def backoff(attempt: int, base: float = 1.0, cap: float = 300.0) -> float:
    return min(base * 2 ** (attempt - 1), cap)
