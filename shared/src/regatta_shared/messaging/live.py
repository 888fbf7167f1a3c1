"""Live output of a running attempt: what an executor forwards while the agent runs, and where.

Chunks are not facts, so they never enter the event store: an executor publishes them on a core subject
per attempt (`live.<run>.<attempt>`) that the bounded `LIVE` stream keeps for late watchers (in memory,
old messages discarded at its limits), and the gateway relays them to the run's workspace over SSE. An
executor caps what one attempt sends (REGATTA_LIVE_RATE_BYTES a second, REGATTA_LIVE_MAX_BYTES in all);
the rest is only in the attempt's artifacts.

Where reading an attempt's output costs engine round trips (the `container` environment reads its log
folders through the engine's archive API), the executor reads it only while someone watches: the gateway
publishes on the attempt's watch subject (`livewatch.<run>.<attempt>`, core NATS, never stored) when a
watcher opens its stream and every `WATCH_EVERY` seconds while it stays open.
"""

from __future__ import annotations

import re
from typing import Literal

from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
from pydantic import BaseModel, ConfigDict, Field

LIVE_STREAM = "LIVE"
LIVE_SUBJECT_PREFIX = "live"
# Outside `live.>`: a heartbeat is not output, and the LIVE stream must not keep it.
WATCH_SUBJECT_PREFIX = "livewatch"
# Seconds between a watcher's heartbeats; an attempt counts as watched for a few of them after the last.
WATCH_EVERY = 2.0
# The largest chunk of text one message carries; a tick with more sends several.
CHUNK_BYTES = 16 * 1024
# Ids become subject tokens: no dots, wildcards or spaces can reach the subject.
_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

# The agent's ATIF trajectory in its log folder, whose steps are sent one by one (`step`, the step's JSON).
TRAJECTORY_FILE = "trajectory.json"
MAX_STEPS = 10_000

Phase = Literal["setup", "agent", "verifier", "done"]

LIVE_STREAM_CONFIG = StreamConfig(
    name=LIVE_STREAM,
    subjects=[f"{LIVE_SUBJECT_PREFIX}.>"],
    retention=RetentionPolicy.LIMITS,
    storage=StorageType.MEMORY,
    discard=DiscardPolicy.OLD,
    max_bytes=128 * 1024 * 1024,
    max_age=6 * 3600,
    max_msg_size=CHUNK_BYTES * 4,
    # Well above what one attempt sends under its caps (a message per tick at most, while it has output).
    max_msgs_per_subject=20_000,
)


def live_subject(run_id: str, attempt_id: str) -> str:
    """The subject of one attempt's live output. Raises ValueError for an id that is not a plain token."""
    for name, value in (("run_id", run_id), ("attempt_id", attempt_id)):
        if not _ID.match(value):
            raise ValueError(f"{name} {value[:80]!r} is not a plain identifier")
    return f"{LIVE_SUBJECT_PREFIX}.{run_id}.{attempt_id}"


def watch_subject(run_id: str, attempt_id: str) -> str:
    """The subject on which watchers of one attempt say they watch. Raises ValueError as `live_subject`."""
    return f"{WATCH_SUBJECT_PREFIX}.{live_subject(run_id, attempt_id).split('.', 1)[1]}"


class LiveChunk(BaseModel):
    """One message on an attempt's live subject: output written since the last one, and/or a phase."""

    model_config = ConfigDict(extra="forbid")

    seq: int = Field(ge=0)
    at: str = Field(max_length=40)  # ISO 8601, when the executor sent it
    phase: Phase | None = None
    file: str | None = Field(None, max_length=255)  # the agent log file the text was read from
    # Set: `text` is the JSON of the trajectory's step of this index (sent again whole when it changed).
    step: int | None = Field(None, ge=0, lt=MAX_STEPS)
    text: str = Field("", max_length=CHUNK_BYTES * 2)
    # The attempt's live cap was reached: what follows is only in the artifacts.
    truncated: bool = False
