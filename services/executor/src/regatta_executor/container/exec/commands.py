"""Commands in a running container: exec with a deadline, and killing what a command or a phase left.

An exec's first process is a session leader inside the container (runc calls setsid), and every exec
carries a unique REGATTA_EXEC token in its environment, which its children inherit. A command that
times out or is cancelled is killed by session and by token, from a second exec running as root.
The kill scripts run with the platform's shell (tools.py), whose applets replace every program they
call: an agent that replaced the image's /bin/sh, tr or grep cannot keep its processes alive.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import functools
import logging
import secrets
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, Any

import docker
from docker.utils.socket import frames_iter

from regatta_executor.container.exec.tools import platform_shell

log = logging.getLogger("regatta.executor.container")

EXEC_TOKEN = "REGATTA_EXEC"
_KILL_GRACE_SEC = 10.0
_EXIT_CODE_WAIT_SEC = 30.0
_START_RETRIES = (0.1, 0.2, 0.4, 0.8, 0.0)
# A command holds a thread (reading its output) for as long as it runs, which may be the whole agent
# phase. Asyncio's default pool has min(32, cores + 4) threads: with more long commands than that, every
# other call, the kill of a timed-out command included, would queue behind them. The environment's file
# transfers run here too, for the same reason.
_STREAMS = ThreadPoolExecutor(max_workers=512, thread_name_prefix="regatta-exec")


async def in_thread[T](function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_STREAMS, functools.partial(function, *args, **kwargs))


# Kills every process carrying the token (argument 1) and every process in the sessions they lead or
# belong to. POSIX sh and busybox applets, /proc only.
KILL_EXEC = r"""
token=$1; sessions=" "
for d in /proc/[0-9]*; do
  [ -r "$d/environ" ] || continue
  if tr '\0' '\n' < "$d/environ" 2>/dev/null | grep -qx "REGATTA_EXEC=$token"; then
    stat=$(cat "$d/stat" 2>/dev/null) || continue
    set -- ${stat##*) }
    sessions="$sessions$4 "
    kill -KILL "${d#/proc/}" 2>/dev/null
  fi
done
for d in /proc/[0-9]*; do
  stat=$(cat "$d/stat" 2>/dev/null) || continue
  set -- ${stat##*) }
  case "$sessions" in *" $4 "*) kill -KILL "${d#/proc/}" 2>/dev/null;; esac
done
exit 0
"""


@dataclass(frozen=True)
class Output:
    stdout: str
    stderr: str
    return_code: int


class CommandTimeoutError(RuntimeError):
    pass


class PlatformCommandError(RuntimeError):
    """A command of the platform's own (end_other_processes) exited non-zero in the container."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


# Harbor's output callback (harbor.environments.base.OutputCallback): a chunk of text and its stream.
OnOutput = Callable[[str, str], Awaitable[None]]
# Output read but not yet taken by the callback, at most: past it, chunks are dropped (and counted) rather
# than the command's pipe held, so a chatty command never waits for its watchers.
_RELAYED_BYTES = 1024 * 1024
_STREAM_NAMES = ("stdout", "stderr")


class _OutputRelay:
    """Hands an exec's output, read in the exec's thread as the engine streams it, to an async callback
    on the loop, in order and bounded."""

    def __init__(self, callback: OnOutput, loop: asyncio.AbstractEventLoop) -> None:
        self._callback = callback
        self._loop = loop
        self._queue: asyncio.Queue[tuple[str, str, int] | None] = asyncio.Queue()
        self._lock = threading.Lock()
        self._pending = 0
        self.dropped = [0, 0]
        self._decoders = [codecs.getincrementaldecoder("utf-8")("replace") for _ in _STREAM_NAMES]
        self._task = loop.create_task(self._pump())

    def feed(self, index: int, data: bytes) -> None:
        """In the exec's thread: one piece of stdout (0) or stderr (1)."""
        with self._lock:
            if self._pending + len(data) > _RELAYED_BYTES:
                self.dropped[index] += len(data)
                return
            self._pending += len(data)
        text = self._decoders[index].decode(data)
        self._loop.call_soon_threadsafe(self._queue.put_nowait, (_STREAM_NAMES[index], text, len(data)))

    async def _pump(self) -> None:
        while (item := await self._queue.get()) is not None:
            stream, text, size = item
            try:
                if text:
                    await self._callback(text, stream)
            except Exception as error:  # a watcher's view, never a reason for the command to fail
                log.warning("command output not relayed: %r", error)
            with self._lock:
                self._pending -= size

    async def close(self) -> None:
        """Once the exec's thread is done: relay what is left, and say what was dropped."""
        for index, count in enumerate(self.dropped):
            if count:
                self._queue.put_nowait((_STREAM_NAMES[index], f"\n[{count} bytes not relayed live]\n", 0))
        self._queue.put_nowait(None)
        await self._task

    def abort(self) -> None:
        self._task.cancel()


def run_blocking(
    api: docker.APIClient,
    container_id: str,
    argv: list[str],
    *,
    env: dict[str, str],
    user: str,
    workdir: str | None,
    max_output_bytes: int,
    on_chunk: Callable[[int, bytes], None] | None = None,
    stdin: IO[bytes] | None = None,
) -> Output:
    """Run one exec to its end (with `stdin`, a seekable file, sent as its standard input). An exec
    the runtime failed to start (no process: pid 0) never ran, so it is tried again a few times: under
    load runc sometimes fails to start one right after another operation on the container (exit 126,
    "unable to find user root: no matching entries in passwd file", or no message at all), and Harbor
    would take that for the command's own failure."""
    for delay in _START_RETRIES:
        output, started = _run_once(
            api,
            container_id,
            argv,
            env=env,
            user=user,
            workdir=workdir,
            max_output_bytes=max_output_bytes,
            on_chunk=on_chunk,
            stdin=stdin,
        )
        if started:
            return output
        time.sleep(delay)
    reason = output.stderr or output.stdout or "the runtime gave no reason"
    return Output(
        output.stdout,
        f"the command could not be started in the container as user {user or '(image default)'!r} "
        f"in {workdir or '(image WORKDIR)'!r}: {reason.strip()}\n",
        output.return_code,
    )


def _run_once(
    api: docker.APIClient,
    container_id: str,
    argv: list[str],
    *,
    env: dict[str, str],
    user: str,
    workdir: str | None,
    max_output_bytes: int,
    on_chunk: Callable[[int, bytes], None] | None = None,
    stdin: IO[bytes] | None = None,
) -> tuple[Output, bool]:
    exec_id = api.exec_create(
        container_id,
        argv,
        environment=env,
        user=user,
        workdir=workdir,
        stdout=True,
        stderr=True,
        stdin=stdin is not None,
    )["Id"]
    streams: list[bytearray] = [bytearray(), bytearray()]
    chunks = (
        api.exec_start(exec_id, stream=True, demux=True)
        if stdin is None
        else _with_input(api.exec_start(exec_id, socket=True), stdin)
    )
    for chunk in chunks:
        for index, data in enumerate(chunk):
            if data and on_chunk is not None:
                on_chunk(index, data)  # as it comes: the live view (bounded by the relay)
            # Keep reading past the cap (the command must not block on a full pipe), keep nothing more.
            if data and len(streams[index]) < max_output_bytes:
                streams[index] += data[: max_output_bytes - len(streams[index])]
    # The output stream can end a moment before the engine records the exit code (more so under load):
    # until then the exec still shows as running, without one.
    deadline = time.monotonic() + _EXIT_CODE_WAIT_SEC
    while (state := api.exec_inspect(exec_id)).get("Running") and time.monotonic() < deadline:
        time.sleep(0.01)
    code = state.get("ExitCode")
    output = Output(
        streams[0].decode("utf-8", "replace"),
        streams[1].decode("utf-8", "replace"),
        -1 if code is None else int(code),
    )
    return output, bool(state.get("Pid")) or code is None


def run_platform(
    api: docker.APIClient,
    container_id: str,
    argv: list[str],
    *,
    stdin: IO[bytes] | None = None,
    max_output_bytes: int = 4096,
) -> Output:
    """A command of the platform's own (argv from tools.platform_shell), as root in /, to its end."""
    return run_blocking(
        api, container_id, argv, env={}, user="0", workdir="/", max_output_bytes=max_output_bytes, stdin=stdin
    )


def sends_input(api: docker.APIClient) -> bool:
    """Whether an exec's standard input can be sent over this engine connection: the engine's socket,
    or plain TCP (a TLS connection cannot be half-closed to end the input)."""
    return api.base_url == "http+docker://localhost" or api.base_url.startswith("http://")


def _with_input(connection: Any, data: IO[bytes]) -> Iterator[tuple[bytes | None, bytes | None]]:
    """The (stdout, stderr) chunks of an exec started with its stream taken over, while `data` is
    sent to its standard input from another thread, then the input closed: a command that reads its
    input only after writing output must not find the writer blocked on a full pipe."""
    raw = getattr(connection, "_sock", connection)

    def send() -> None:
        try:
            data.seek(0)
            while block := data.read(256 * 1024):
                raw.sendall(block)
            raw.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the command ended without reading it all: its exit code says what happened

    writer = threading.Thread(target=send, name="regatta-exec-input", daemon=True)
    writer.start()
    try:
        for stream, chunk in frames_iter(connection, tty=False):
            yield (chunk, None) if stream == 1 else (None, chunk)
    finally:
        with contextlib.suppress(OSError):
            connection.close()
        writer.join(timeout=_KILL_GRACE_SEC)


async def run_command(
    api: docker.APIClient,
    container_id: str,
    argv: list[str],
    *,
    env: dict[str, str],
    user: str,
    workdir: str | None,
    timeout_sec: float | None,
    max_output_bytes: int,
    on_output: OnOutput | None = None,
    stdout_sink: Callable[[bytes], bytes] | None = None,
) -> Output:
    """Run `argv` to its end; past `timeout_sec`, or when cancelled, kill it (and what it started).
    `on_output` hears the output while the command runs, as the engine streams it. `stdout_sink` takes
    each piece of standard output and returns the part of it that is the command's own: only that is
    heard and returned as the output's stdout (the rest is the sink's)."""
    token = secrets.token_hex(12)
    relay = _OutputRelay(on_output, asyncio.get_running_loop()) if on_output is not None else None
    own = bytearray()

    def chunk(index: int, data: bytes) -> None:
        if index == 0 and stdout_sink is not None:
            data = stdout_sink(data)
            own.extend(data[: max(0, max_output_bytes - len(own))])
        if data and relay is not None:
            relay.feed(index, data)

    running = asyncio.ensure_future(
        in_thread(
            run_blocking,
            api,
            container_id,
            argv,
            env={**env, EXEC_TOKEN: token},
            user=user,
            workdir=workdir,
            max_output_bytes=max_output_bytes,
            on_chunk=chunk if relay is not None or stdout_sink is not None else None,
        )
    )
    try:
        output = await asyncio.wait_for(asyncio.shield(running), timeout=timeout_sec)
    except TimeoutError:
        if relay is not None:
            relay.abort()
        await _kill(api, container_id, token, running)
        raise CommandTimeoutError(f"Command timed out after {timeout_sec} seconds") from None
    except asyncio.CancelledError:
        if relay is not None:
            relay.abort()
        await _kill(api, container_id, token, running)
        raise
    if relay is not None:
        await relay.close()
    if stdout_sink is not None:
        return Output(own.decode("utf-8", "replace"), output.stderr, output.return_code)
    return output


async def _kill(api: docker.APIClient, container_id: str, token: str, running: asyncio.Future) -> None:
    try:
        await in_thread(
            run_blocking,
            api,
            container_id,
            platform_shell(KILL_EXEC, token),
            env={},
            user="0",
            workdir="/",
            max_output_bytes=4096,
        )
    except docker.errors.DockerException:
        return  # the container is gone, and the command with it
    # The exec's stream ends once its processes are gone; don't wait forever if it does not.
    await asyncio.wait([running], timeout=_KILL_GRACE_SEC)
