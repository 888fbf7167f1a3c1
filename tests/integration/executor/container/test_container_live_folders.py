"""Issue 38: the live view reads a container's log folders through the engine's archive API (live_logs.py),
only while watched and while the folder is the phase's (live_sources.py), backing off while nothing
changes; what it reads goes through the same redaction and caps as a host folder's."""

from __future__ import annotations

import asyncio
import io
import tarfile
import uuid
from pathlib import Path

import docker
import pytest
from regatta_executor.attempt.live_output import Budget, LiveOutput
from regatta_executor.attempt.live_sources import MAX_INTERVAL, MIN_INTERVAL, SandboxPoll
from regatta_executor.attempt.redaction import REDACTED, Redactor
from regatta_executor.container.live_logs import read_files, regular_files
from regatta_shared.messaging.live import LiveChunk

from tests.integration.container_support import started_environment

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("built_images_removed")]
SECRET = "lsk-" + uuid.uuid4().hex


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_the_agents_folder_is_read_only_while_watched_and_during_its_turn(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    sent: list[LiveChunk] = []

    async def publish(payload: bytes) -> None:
        sent.append(LiveChunk.model_validate_json(payload))

    watched = [False]
    clock = Clock()
    async with started_environment(tmp_path) as env:
        live = LiveOutput(publish, tmp_path / "host-agent", Redactor([SECRET]), Budget(65536, 1 << 20))
        poll = live.sandbox = SandboxPoll(env, lambda: watched[0], clock=clock)
        # A link to a file outside the folder, a FIFO (a read of it would block) and a subfolder: none
        # is a log file.
        await env.exec(
            f"printf 'a line with {SECRET}\\n' > /logs/agent/oracle.txt && ln -s /etc/passwd /logs/agent/link"
            " && mkfifo /logs/agent/fifo && mkdir -p /logs/agent/deeper && echo x > /logs/agent/deeper/f"
        )
        assert env.live_folder() is None  # outside the agent's turn: nothing is read
        with env.scoped_exec_env({}):
            assert env.live_folder() == "agent"
            await live.tick()
            assert poll.reads == 0 and not [c for c in sent if c.text], "not watched: not read"
            watched[0] = True
            await live.tick()
            assert poll.reads == 1
            assert [(c.file, c.text) for c in sent if c.text] == [("oracle.txt", f"a line with {REDACTED}\n")]
            # Nothing changed: the next read waits longer each time, up to MAX_INTERVAL.
            waits = []
            for _ in range(5):
                before = poll.reads
                start = clock.now
                while poll.reads == before:
                    clock.now += 0.25
                    await live.tick()
                waits.append(clock.now - start)
            assert waits == [MIN_INTERVAL, 2 * MIN_INTERVAL, 4 * MIN_INTERVAL, MAX_INTERVAL, MAX_INTERVAL]
            await env.exec("echo 'a second line' >> /logs/agent/oracle.txt")
            clock.now += MAX_INTERVAL
            await live.tick()
            clock.now += MIN_INTERVAL  # changed: the next read is a second away again
            await env.exec("echo 'a third line' >> /logs/agent/oracle.txt")
            await live.tick()
        clock.now += MAX_INTERVAL
        reads = poll.reads
        await live.tick()
        assert poll.reads == reads and env.live_folder() is None
        assert poll.copy("agent") is None, "the turn is over: forgotten (the host's copy answers)"
    shown = "".join(c.text for c in sent if c.file == "oracle.txt")
    assert shown == f"a line with {REDACTED}\na second line\na third line\n"
    assert {c.file for c in sent if c.text} == {"oracle.txt"}
    assert SECRET not in "".join(c.model_dump_json() for c in sent)


async def test_a_folder_is_read_whole_files_only_within_its_cap(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    async with started_environment(tmp_path) as env:
        await env.exec("for f in a b; do head -c 3000 /dev/zero > /logs/agent/$f.txt; done")
        container = env._container_id
        assert container is not None
        api = env._client.api
        whole = await asyncio.to_thread(read_files, api, container, "/logs/agent")
        assert whole is not None and sorted(whole) == ["a.txt", "b.txt"] and len(whole["b.txt"]) == 3000
        # Cut inside the second file: the first alone, whole.
        cut = await asyncio.to_thread(read_files, api, container, "/logs/agent", 6000)
        assert cut is not None and list(cut) == ["a.txt"] and len(cut["a.txt"]) == 3000
        assert await asyncio.to_thread(read_files, api, container, "/logs/none") is None


def test_an_archive_cut_anywhere_gives_the_whole_files_before_the_cut() -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, body in (("agent", None), ("agent/one.txt", b"1" * 700), ("agent/two.txt", b"2" * 700)):
            info = tarfile.TarInfo(name)
            if body is None:
                info.type = tarfile.DIRTYPE
                archive.addfile(info)
            else:
                info.size = len(body)
                archive.addfile(info, io.BytesIO(body))
    data = buffer.getvalue()
    assert regular_files(data) == {"one.txt": b"1" * 700, "two.txt": b"2" * 700}
    for cut in range(0, len(data), 97):
        found = regular_files(data[:cut])
        assert all(len(body) == 700 for body in found.values()), cut
        assert list(found) in ([], ["one.txt"], ["one.txt", "two.txt"]), cut
