"""The projection runner: folds the event log into read models, position by position.

Each batch applies its events and moves the checkpoint in one transaction, so a crash replays
a batch instead of skipping it (invariant 2). Projections must be deterministic functions of the
events (invariant 7): `rebuild` drops the read models and replays the whole log into them.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from sqlalchemy import Connection, Dialect, MetaData, text
from sqlalchemy.schema import CreateIndex, CreateTable

from regatta_shared.eventstore import EventStore, StoredEvent

log = logging.getLogger("regatta.projections")
_WAKE_WINDOW = 0.02
# Larger than a live batch: a rebuild has the whole log to read, and an attempt's scheduled, started
# and finished events then mostly fall in one batch, written as one row instead of an insert and updates.
_REBUILD_BATCH = 5000


class Projection(Protocol):
    """A projection may also define `apply_batch(conn, events)`: the same effects as `apply` on each
    event in order, written in fewer statements. The runner prefers it."""

    name: str
    metadata: MetaData

    def apply(self, conn: Connection, event: StoredEvent) -> None: ...


def schema_fingerprint(metadata: MetaData, dialect: Dialect) -> int:
    """A number that changes with the DDL of `metadata`'s tables and indexes (positive, fits BIGINT)."""
    ddl = [str(CreateTable(table).compile(dialect=dialect)) for table in metadata.sorted_tables]
    ddl += [
        str(CreateIndex(index).compile(dialect=dialect))
        for table in metadata.sorted_tables
        for index in sorted(table.indexes, key=lambda i: i.name or "")
    ]
    return int.from_bytes(hashlib.sha256("\n".join(ddl).encode()).digest()[:7], "big")


class ProjectionRunner:
    def __init__(self, store: EventStore, projection: Projection, batch_size: int = 1000) -> None:
        self.store = store
        self.projection = projection
        self.batch_size = batch_size
        self.checkpoint_name = f"projection:{projection.name}"
        # Where this runner last left the checkpoint: spares a read per wake. Only a hint, because
        # _apply checks it again under the lock; a runner elsewhere moving it costs one empty round.
        self._position: int | None = None

    @property
    def _schema_name(self) -> str:
        return f"schema:{self.projection.name}"

    def _fingerprint(self) -> int:
        return schema_fingerprint(self.projection.metadata, self.store.engine.dialect)

    def create_tables(self) -> bool:
        """Create the read models; if their schema changed since they were built (a new column, a new
        table), drop them and start from position 0, so the runner rebuilds them from the log. True
        when they were dropped: `rebuild` then refills them fastest."""
        with self.store.transaction() as conn:
            self._lock(conn)  # no batch is applied to half-dropped tables
            changed = self.store.checkpoint(self._schema_name, conn) != self._fingerprint()
            if changed:
                log.info("read models of %s: new schema, rebuilding them from the log", self.projection.name)
                self._reset(conn)
        self.store.create_tables(self.projection.metadata)
        return changed

    def _lock(self, conn: Connection) -> None:
        """The projection's own lock, held until `conn`'s transaction ends (SQLite has one writer)."""
        if not self.store.is_sqlite:
            conn.execute(text("SELECT pg_advisory_xact_lock(hashtext(:n))"), {"n": self.checkpoint_name})

    def _reset(self, conn: Connection) -> None:
        """Empty read models of the current schema, to be filled from position 0."""
        self._position = None
        self.projection.metadata.drop_all(conn)
        self.projection.metadata.create_all(conn)
        self.store.save_checkpoint(conn, self.checkpoint_name, 0)
        self.store.save_checkpoint(conn, self._schema_name, self._fingerprint())

    def run_once(self) -> int:
        position = self._position
        if position is None:
            position = self.store.checkpoint(self.checkpoint_name)
        batch = self.store.read_all(position, self.batch_size)
        if not batch:
            self._position = position
            return 0
        if not self._apply(position, batch):
            self._position = None
            return 0
        self._position = batch[-1].position
        return len(batch)

    def _apply(self, position: int, batch: list[StoredEvent]) -> bool:
        """Apply `batch` (the events after `position`) and move the checkpoint, in one transaction;
        False, changing nothing, when the checkpoint is no longer at `position`."""
        with self.store.transaction() as conn:
            self._lock(conn)
            # Re-read the checkpoint under the lock: two runners of one projection never double-apply.
            if self.store.checkpoint(self.checkpoint_name, conn) != position:
                return False
            apply_batch = getattr(self.projection, "apply_batch", None)
            if apply_batch is not None:
                apply_batch(conn, batch)
            else:
                for event in batch:
                    self.projection.apply(conn, event)
            self.store.save_checkpoint(conn, self.checkpoint_name, batch[-1].position)
        return True

    def catch_up(self) -> int:
        """Apply every event stored when called (read-your-writes for the gateway's commands).

        `run_once` yields 0 when another runner of this projection moved the checkpoint first; that
        runner may have read its batch before our event was stored, so wait for the checkpoint itself.
        """
        target = self.store.last_position()
        total = 0
        while True:
            count = self.run_once()
            total += count
            if count == 0:
                if self.store.checkpoint(self.checkpoint_name) >= target:
                    return total
                time.sleep(0.005)

    def rebuild(self, batch_size: int = _REBUILD_BATCH) -> int:
        """Drop the read models and replay the whole log into them.

        The log's next batch is read (and its JSON decoded) on a second thread while this one applies
        the current batch: the database's read and write halves then overlap, nearly halving a
        rebuild. Each batch still commits with its checkpoint, so an interrupted rebuild resumes."""
        # Secondary indexes are built once over the loaded rows, several times cheaper than keeping
        # them up row by row; after an interrupted rebuild, create_tables restores them at the next start.
        tables = self.projection.metadata.sorted_tables
        deferred = [index for table in tables for index in table.indexes if not index.unique]
        with self.store.transaction() as conn:
            self._reset(conn)
            for index in deferred:
                index.drop(conn)
        total = 0
        with ThreadPoolExecutor(1, thread_name_prefix=f"rebuild-{self.projection.name}") as reader:
            position = 0
            pending = reader.submit(self.store.read_all, position, batch_size)
            while batch := pending.result():
                pending = reader.submit(self.store.read_all, batch[-1].position, batch_size)
                if not self._apply(position, batch):
                    break  # another runner is applying this projection: let catch_up follow it
                position = batch[-1].position
                total += len(batch)
        total += self.catch_up()
        with self.store.transaction() as conn:
            for index in deferred:
                index.create(conn)
        return total

    async def run_forever(
        self,
        stop: asyncio.Event | None = None,
        max_idle_sleep: float = 0.1,
        wake: asyncio.Event | None = None,
    ) -> None:
        """`wake`: set when events were committed (nudge.wake_on_commit). With it the quiet-time poll
        is only a backstop for lost nudges, so it may be slow."""
        idle = 0.005
        while stop is None or not stop.is_set():
            if wake is not None:
                wake.clear()  # before reading: a nudge during the read is not lost
            try:
                count = await asyncio.to_thread(self.run_once)
            except Exception:
                log.exception("projection %s failed; retrying", self.projection.name)
                await _wait_any(1.0, stop)
                continue
            if count:
                idle = 0.005
            if count >= self.batch_size:
                continue
            # Back off while the log is quiet so an idle gateway costs (almost) no CPU.
            if wake is None:
                await _wait_any(idle, stop)
            else:
                applied_at = time.monotonic()
                # Woken by commits, the poll is only the backstop for a lost nudge.
                await _wait_any(max_idle_sleep, stop, wake)
                # A busy run commits many times a second; folding what a short window brings in one
                # transaction spares the single SQLite writer lock the writers of events need. The
                # window counts from the last batch, so the first commit after a quiet spell (a run's
                # RunFinished, say) is applied at once rather than a window later.
                await asyncio.sleep(max(0.0, applied_at + _WAKE_WINDOW - time.monotonic()))
            idle = min(idle * 2, max_idle_sleep)


async def _wait_any(timeout: float, *events: asyncio.Event | None) -> None:
    """Until one of `events` is set or `timeout` passes: a stop must not wait out a quiet-time poll."""
    waits = [asyncio.ensure_future(event.wait()) for event in events if event is not None]
    if not waits:
        await asyncio.sleep(timeout)
        return
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
