"""Two runners of one projection (two gateway processes) apply each event once, whatever position
each of them remembers (ProjectionRunner keeps its last position only as a hint)."""

from __future__ import annotations

import asyncio

from regatta_shared.events import UserRegistered
from regatta_shared.eventstore import EventStore, new_event
from regatta_shared.eventstore.projections import ProjectionRunner

from .test_projection_schema import Users, _rows


def _register(store: EventStore, *names: str) -> None:
    for name in names:
        store.append(f"user-{name}", [new_event(UserRegistered(user_id=name, email=f"{name}@x", name=name))])


def test_two_runners_of_one_projection_apply_each_event_once(store: EventStore) -> None:
    first, second = ProjectionRunner(store, Users(1)), ProjectionRunner(store, Users(1))
    first.create_tables()
    _register(store, "ada", "grace")
    assert first.run_once() == 2
    assert second.run_once() == 0, "the checkpoint is read, not assumed"
    _register(store, "linus", "barbara")
    assert first.run_once() == 2
    # The second remembers position 2; the checkpoint moved on under the lock, so it applies nothing.
    assert second.run_once() == 0
    _register(store, "edsger")
    assert second.run_once() == 1 and first.run_once() == 0
    names = [row[1] for row in _rows(store, first.projection)]
    assert sorted(names) == ["ada", "barbara", "edsger", "grace", "linus"]
    assert store.checkpoint(first.checkpoint_name) == store.last_position()


async def test_a_quiet_runner_stops_when_told_not_after_its_poll(store: EventStore) -> None:
    # The backstop poll (an hour) is far longer than the wait below, so only the stop can end the loop.
    runner = ProjectionRunner(store, Users(1))
    runner.create_tables()
    stop = asyncio.Event()
    loop = asyncio.create_task(runner.run_forever(stop, max_idle_sleep=3600.0, wake=asyncio.Event()))
    _register(store, "ada")
    while not _rows(store, runner.projection):
        await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(loop, timeout=60)
    assert loop.exception() is None
