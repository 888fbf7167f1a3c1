"""Queueing attempts' jobs on JOBS: at once after the scheduler appended them, and again (only those
not known to be queued) when the relay brings their AttemptScheduled events back."""

from __future__ import annotations

import asyncio

from nats.js import JetStreamContext
from regatta_shared.eventstore import StoredEvent
from regatta_shared.messaging.bus import JOB_SUBJECT, JOBS_STREAM

from .scheduler import RunScheduler

# Past this many remembered ids the memory is dropped: only an optimisation, the durable path then
# sends copies JOBS drops.
_QUEUED_KEPT = 100_000


class JobDispatch:
    def __init__(self, js: JetStreamContext, scheduler: RunScheduler) -> None:
        self.js = js
        self.scheduler = scheduler
        # Jobs this process queued right after their append, by event id. When the relay brings the
        # same AttemptScheduled back, the durable path skips them instead of building and sending a
        # copy that JOBS would drop anyway. After a restart the set is empty and every job is sent again.
        self._queued: set[str] = set()

    async def dispatch_scheduled(self) -> None:
        """Queue the jobs of attempts this process just scheduled, without waiting for the relay to
        bring their events back. The consumer of AttemptScheduled still sees every one: it sends the
        jobs this process did not get a JetStream ack for (a crash or a failed publish right after the
        append loses nothing). A job with an ack is stored in JOBS (an R1 file stream writes before it
        acks), so its second copy, which JOBS would drop by message id, is not built or sent."""
        scheduled = self.scheduler.take_scheduled()
        if scheduled:
            await self.dispatch(scheduled)
            if len(self._queued) > _QUEUED_KEPT:
                self._queued.clear()
            self._queued.update(event.event_id for event in scheduled)

    async def dispatch_relayed(self, events: list[StoredEvent]) -> None:
        fresh = [event for event in events if event.event_id not in self._queued]
        self._queued.difference_update(event.event_id for event in events)
        await self.dispatch(fresh)

    async def dispatch(self, events: list[StoredEvent]) -> None:
        if not events:
            return
        jobs = zip(events, await asyncio.to_thread(self.scheduler.jobs_for, events), strict=True)
        # Msg-Id = the scheduled event's id: a redelivered AttemptScheduled never queues the job twice.
        await asyncio.gather(
            *(
                self.js.publish(
                    JOB_SUBJECT,
                    job.model_dump_json().encode(),
                    stream=JOBS_STREAM,
                    timeout=10,
                    headers={"Nats-Msg-Id": event.event_id},
                )
                for event, job in jobs
                if job is not None
            )
        )
