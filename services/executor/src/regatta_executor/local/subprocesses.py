"""Asyncio helpers for the sandbox's host-side processes: pipes, process groups and output files."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

OutputCallback = Callable[[str, str], Awaitable[None]]

_STREAM_POLL_SEC = 0.1


async def read_until(fd: int, done: Callable[[bytes], bool]) -> bytes:
    """Read a pipe without blocking the event loop until `done(data)` or EOF."""
    os.set_blocking(fd, False)
    loop = asyncio.get_running_loop()
    data = b""
    while not done(data):
        readable: asyncio.Future[None] = loop.create_future()
        loop.add_reader(fd, _resolve_once, readable)
        try:
            await readable
        finally:
            loop.remove_reader(fd)
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            continue
        if not chunk:
            break
        data += chunk
    return data


def _resolve_once(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def kill(process: asyncio.subprocess.Process) -> None:
    """SIGKILL a child that has not been reaped yet. Not Process.kill(): Popen polls (and so reaps)
    the child first, racing asyncio's child watcher, which then waits forever or reports 255."""
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)


async def kill_group(process: asyncio.subprocess.Process) -> None:
    """SIGKILL a process group led by `process` (started with start_new_session) until it is empty:
    members forked while the signal was being delivered get it on the next round."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    await process.wait()
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        await asyncio.sleep(0.01)


async def stream_lines(path: Path, finished: Callable[[], bool], on_output: OutputCallback) -> None:
    """Relay complete output lines while the command runs (until `finished()`); the output file keeps
    the full copy. Polled: the file is written from inside the sandbox, where no notification reaches."""
    position, pending = 0, b""
    while True:
        done = finished()
        with open(path, "rb") as file:
            file.seek(position)
            chunk = file.read()
        position += len(chunk)
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            await on_output(line.decode(errors="replace") + "\n", "stdout")
        if done:
            if pending:
                await on_output(pending.decode(errors="replace"), "stdout")
            return
        await asyncio.sleep(_STREAM_POLL_SEC)


def take_output(path: Path) -> str | None:
    """Read and delete a command's output file."""
    try:
        data = path.read_bytes()
        path.unlink()
    except FileNotFoundError:
        return None
    return data.decode(errors="replace") or None
