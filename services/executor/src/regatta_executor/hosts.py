"""Executor hosts on the bus: each announces its capacity in a KV bucket, and each job is placed by it.

An executor puts its HostCapacity under its own key at start and every HEARTBEAT_SEC; the bucket's TTL
drops the key of one that was killed, and one that stops cleanly withdraws it once it has drained (its
consumer stops first: runtime.Service.stop). Jobs are not addressed to hosts: every executor pulls the
shared JOBS durable, and one too small for a task hands its job back (placement.py) so that another
takes it. Such hand-backs are counted per job in a second bucket, because JetStream counts every
delivery and REGATTA_EXECUTOR_MAX_DELIVERIES is about the deliveries that failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from datetime import UTC, datetime

import nats.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError, NotFoundError
from nats.js.kv import KeyValue
from pydantic import ValidationError
from regatta_shared.bus import EXECUTOR_HOSTS_BUCKET, JOB_HANDBACKS_BUCKET
from regatta_shared.jobs import AttemptJob

from .capacity import HostCapacity, shortfall
from .placement import Placement, place
from .task_cache import TaskCache
from .task_ceilings import resources_asked

log = logging.getLogger("regatta.executor")

HEARTBEAT_SEC = 5.0
# A job handed back comes back after this; long enough that hosts too small for it do not spin on it.
HAND_BACK_SEC = 3.0
# An announcement larger than this is not one of ours; hosts read at most this many.
_MAX_ANNOUNCEMENT_BYTES = 4096
_MAX_HOSTS = 1000
_KEY_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_ATTEMPT_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


def host_key(executor_id: str) -> str:
    """The executor's key in the hosts bucket (KV keys take letters, digits, `-` and `_` here)."""
    return _KEY_UNSAFE.sub("_", executor_id)[:200] or "executor"


def handback_key(job: AttemptJob) -> str | None:
    """The job's key in the hand-backs bucket: the attempt and its re-run, or None for an attempt id
    no key can hold (its hand-backs then count as failed deliveries)."""
    if not _ATTEMPT_ID.match(job.attempt_id):
        return None
    return f"{job.attempt_id}_{job.rerun}"


async def live_hosts(js: JetStreamContext, kv: KeyValue) -> list[HostCapacity]:
    """Every live announcement: the bucket's subjects listed, each key's last value read (no consumer,
    so an executor's NATS user needs only stream info and message gets)."""
    info = await js.stream_info(f"KV_{EXECUTOR_HOSTS_BUCKET}", subjects_filter=">")
    prefix = f"$KV.{EXECUTOR_HOSTS_BUCKET}."
    hosts = []
    subjects = list((info.state.subjects or {}) if info.state else {})
    for subject in sorted(subjects)[:_MAX_HOSTS]:
        if not subject.startswith(prefix):
            continue
        try:
            entry = await kv.get(subject[len(prefix) :])
        except KeyNotFoundError:  # withdrawn (a delete marker) or expired meanwhile
            continue
        value = entry.value or b""
        if len(value) > _MAX_ANNOUNCEMENT_BYTES:
            continue
        try:
            hosts.append(HostCapacity.model_validate_json(value))
        except ValidationError:
            log.warning("an executor announcement that is not a HostCapacity was ignored: %s", subject[:200])
    return hosts


class Hosts:
    """This executor's announcement and its decisions on jobs it cannot hold."""

    def __init__(self, js: JetStreamContext, here: HostCapacity, wait_limit_sec: float) -> None:
        self.js = js
        self.here = here
        self.wait_limit_sec = wait_limit_sec
        self.key = host_key(here.executor_id)
        self.hosts: KeyValue | None = None
        self.handbacks: KeyValue | None = None
        # Hosts this executor saw announced, and when (monotonic): one that left within the wait limit
        # is waited for (a restart) rather than having its jobs refused in the gap.
        self.seen: dict[str, tuple[HostCapacity, float]] = {}

    async def open(self) -> None:
        self.hosts = await self.js.key_value(EXECUTOR_HOSTS_BUCKET)
        self.handbacks = await self.js.key_value(JOB_HANDBACKS_BUCKET)

    async def announce(self, stop: asyncio.Event) -> None:
        """A runtime loop: announce until the stop (which comes after the drain), then withdraw."""
        assert self.hosts is not None, "open() first"
        payload = self.here.model_dump_json().encode()
        log.info(
            "announcing %s: %g CPUs, %d MiB memory, %d MiB storage, %d slots",
            self.key,
            self.here.cpus,
            self.here.memory_mb,
            self.here.storage_mb,
            self.here.slots,
        )
        while not stop.is_set():
            try:
                await self.hosts.put(self.key, payload)
            except Exception as error:  # NATS reconnecting: the next beat tries again
                log.warning("announcing this host failed: %r", error)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), HEARTBEAT_SEC)
        try:
            await self.hosts.delete(self.key)
            log.info("withdrew %s from the executor hosts", self.key)
        except Exception as error:
            log.warning("withdrawing this host failed (its key expires on its own): %r", error)

    async def decide(self, job: AttemptJob, msg: Msg, tasks: TaskCache) -> Placement:
        """Run, hand back or refuse `job`. A task whose files cannot be read is run: the attempt then
        reports what is wrong with them."""
        try:
            async with tasks.use(job.task_digest, job.task) as task_dir:
                asked = await asyncio.to_thread(resources_asked, task_dir)
        except Exception:  # archive gone or refused, task.toml unreadable: the attempt says which
            return Placement("run")
        if not shortfall(asked, self.here):
            return Placement("run")
        assert self.hosts is not None, "open() first"
        try:
            hosts = await live_hosts(self.js, self.hosts)
        except (nats.errors.Error, NotFoundError, TimeoutError) as error:
            return Placement("hand_back", f"the executor hosts cannot be read now ({error!r})")
        return place(asked, self.here, hosts, _waited(msg), self.wait_limit_sec, self._gone(hosts))

    def _gone(self, live: list[HostCapacity]) -> list[HostCapacity]:
        """The hosts seen within the wait limit that are no longer announced; `live` remembered."""
        now = time.monotonic()
        for host in live:
            self.seen[host.executor_id] = (host, now)
        if len(self.seen) > _MAX_HOSTS:
            oldest = sorted(self.seen, key=lambda key: self.seen[key][1])
            for key in oldest[: len(self.seen) - _MAX_HOSTS]:
                del self.seen[key]
        current = {host.executor_id for host in live}
        return [
            host
            for key, (host, at) in self.seen.items()
            if key not in current and now - at < self.wait_limit_sec
        ]

    async def handed_back(self, job: AttemptJob) -> int:
        """How often the job was handed back for want of capacity (0 when unknown)."""
        key = handback_key(job)
        if key is None or self.handbacks is None:
            return 0
        try:
            entry = await self.handbacks.get(key)
            return int(entry.value or b"0")
        except (KeyNotFoundError, ValueError):
            return 0
        except Exception as error:
            log.warning("attempt %s: its hand-backs cannot be read: %r", job.attempt_id, error)
            return 0

    async def count_hand_back(self, job: AttemptJob) -> int:
        """One more hand-back of the job, and how many there were (0: not counted); a compare-and-set,
        as several hosts hand it back at once."""
        key = handback_key(job)
        if key is None or self.handbacks is None:
            return 0
        for _ in range(5):
            try:
                try:
                    entry = await self.handbacks.get(key)
                except KeyNotFoundError:
                    await self.handbacks.create(key, b"1")
                    return 1
                count = int(entry.value or b"0") + 1
                await self.handbacks.update(key, str(count).encode(), last=entry.revision)
                return count
            except (KeyWrongLastSequenceError, nats.js.errors.APIError):
                continue  # another host counted meanwhile
            except Exception as error:
                log.warning("attempt %s: a hand-back was not counted: %r", job.attempt_id, error)
                return 0
        return 0


def _waited(msg: Msg) -> float:
    """Seconds since the job was queued (its JetStream timestamp); 0 for anything else."""
    try:
        queued = msg.metadata.timestamp
    except Exception:
        return 0.0
    if queued.tzinfo is None:
        queued = queued.replace(tzinfo=UTC)
    return max(0.0, (datetime.now(UTC) - queued).total_seconds())
