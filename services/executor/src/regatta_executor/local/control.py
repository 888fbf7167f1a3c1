"""The executor's end of the control socket to a sandbox's pid 1 (the other end: init.py).

Messages are NUL-separated fields on a SOCK_SEQPACKET socket, so each one arrives whole; the output
files of a command travel as file descriptors (SCM_RIGHTS), never through the socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket

# Commands larger than this travel in a memfd instead of the control message.
_INLINE_LIMIT = 32 * 1024


class SandboxGone(RuntimeError):
    """The sandbox's pid 1 is gone: the sandbox was stopped, or died."""


class SandboxControl:
    """The executor's end of the control socket to the sandbox's pid 1 (protocol: init.py)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._loop = asyncio.get_running_loop()
        self._pending: dict[str, asyncio.Future[int]] = {}
        self._closed = False
        sock.setblocking(False)
        self._loop.add_reader(sock.fileno(), self._on_readable)

    async def run(self, command_id: str, cwd: str, command: str, env: dict[str, str], fds: list[int]) -> None:
        """Ask pid 1 to start a command; its return code arrives on `result(command_id)`."""
        fields = [cwd, command, *(f"{k}={v}" for k, v in env.items())]
        if any("\0" in value for value in fields):
            raise ValueError("a command, its environment and its cwd cannot contain NUL characters")
        payload = "\0".join(fields).encode()
        self._pending[command_id] = self._loop.create_future()
        if len(payload) <= _INLINE_LIMIT:
            await self._send(b"run\0" + command_id.encode() + b"\0" + payload, fds)
            return
        memfd = os.memfd_create("regatta-command", os.MFD_CLOEXEC)
        try:
            os.write(memfd, payload)
            os.lseek(memfd, 0, os.SEEK_SET)
            await self._send(b"runfd\0" + command_id.encode(), [*fds, memfd])
        finally:
            os.close(memfd)

    def result(self, command_id: str) -> asyncio.Future[int]:
        return self._pending[command_id]

    def kill(self, command_id: str) -> None:
        """SIGKILL the command's process group. Best effort: stop() kills everything anyway."""
        with contextlib.suppress(OSError):
            self._sock.sendmsg([b"kill\0" + command_id.encode()])

    async def kill_all(self, request_id: str) -> None:
        """Have pid 1 SIGKILL every other process of the sandbox; returns once none is left."""
        done = self._pending[request_id] = self._loop.create_future()
        try:
            await self._send(b"killall\0" + request_id.encode(), [])
            await done
        finally:
            self.forget(request_id)

    def forget(self, command_id: str) -> None:
        self._pending.pop(command_id, None)

    def close(self, reason: str) -> None:
        if self._closed:
            return
        self._closed = True
        self._loop.remove_reader(self._sock.fileno())
        self._sock.close()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(SandboxGone(reason))
                future.exception()  # retrieved here: nobody may be waiting any more
        self._pending.clear()

    async def _send(self, message: bytes, fds: list[int]) -> None:
        rights = b"".join(fd.to_bytes(4, "little") for fd in fds)
        ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)] if fds else []
        while True:
            if self._closed:
                raise SandboxGone("the sandbox is not running")
            try:
                self._sock.sendmsg([message], ancillary)
                return
            except BlockingIOError:
                writable: asyncio.Future[None] = self._loop.create_future()
                self._loop.add_writer(self._sock.fileno(), _resolve, writable)
                try:
                    await writable
                finally:
                    self._loop.remove_writer(self._sock.fileno())
            except (BrokenPipeError, ConnectionResetError):
                self.close("the sandbox's pid 1 exited")
                raise SandboxGone("the sandbox's pid 1 exited") from None

    def _on_readable(self) -> None:
        while not self._closed:
            try:
                data = self._sock.recv(4096)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self.close("the sandbox's pid 1 exited")
                return
            verb, command_id, value = data.decode(errors="replace").split("\0", 2)
            future = self._pending.get(command_id)
            if future is None or future.done():
                continue
            if verb == "exit":
                future.set_result(int(value))
            else:
                future.set_exception(StartFailed(value))


class StartFailed(RuntimeError):
    """pid 1 could not fork the command (typically: the sandbox is at its process limit)."""


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
