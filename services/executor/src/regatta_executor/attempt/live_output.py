"""An attempt's agent output, forwarded while it runs (regatta_shared.messaging.live): read from the trial's
agent log folder on this host (where the sandbox writes it, bind-mounted: the `local` environment), redacted,
capped, and published on the attempt's live subject with the trial's phase.

The folder's trajectory (ATIF `trajectory.json`, rewritten whole as the agent goes: terminus-2 after every
step) is not a log: each time it changes it is parsed, and each step that is new or changed since it was
last sent goes out on its own, as JSON with every string redacted, under the same caps.

Where the folder is not on this host while the agent runs (the `container` environment), its copies
read from the sandbox while someone watches (`sandbox`, live_sources.py) stand in for it, and the
verifier's folder is followed the same way once the verifier runs (as `verifier/<name>`); an installed
agent's commands' output is pushed in too as the engine streams it (`command_output`, Harbor's log
callback), held in a bounded buffer until the budget lets it out. The host's copies brought back when the
trial ends carry on from what was sent.

The folders are written by the agent and read as hostile (live_sources.py), never more bytes a tick than
the budget allows. A secret may be split across two reads: each file is redacted on a carried-over
window (the end of a read that begins some form of a secret), so a value is only sent once it is whole.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import hashlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from regatta_shared.messaging.live import CHUNK_BYTES, MAX_STEPS, TRAJECTORY_FILE, LiveChunk, Phase

from .live_sources import FOLLOWED, CopiedFolder, Folder, HostFolder, SandboxPoll
from .redaction import Redactor

log = logging.getLogger("regatta.executor.live")

# A larger trajectory is not parsed live (the artifacts hold it); one that changes is parsed at most this
# often.
_TRAJECTORY_MAX_BYTES = 8 * 1024 * 1024
_TRAJECTORY_EVERY = 1.0
# What a step too large for one message is cut to: its strings, then its lists, shorter and shorter.
_STRING_CUTS = (4096, 1024, 256, 64)
_LIST_CUT = 50
# Command output held for the budget per stream; past it, output is dropped (and a note says how much)
# until what is held has gone out.
_PUSHED_MAX = 256 * 1024

Publish = Callable[[bytes], Awaitable[None]]


class Budget:
    """Bytes an attempt may still send: `rate` a second (a second's worth of burst) and `total` in all."""

    def __init__(self, rate: int, total: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate, self.total, self.sent = rate, total, 0
        self._clock = clock
        self._tokens = float(rate)
        self._at = clock()

    def allowance(self) -> int:
        now = self._clock()
        self._tokens = min(float(self.rate), self._tokens + (now - self._at) * self.rate)
        self._at = now
        return max(0, min(int(self._tokens), self.total - self.sent))

    def spend(self, count: int) -> None:
        self._tokens -= count
        self.sent += count

    @property
    def exhausted(self) -> bool:
        return self.sent >= self.total


class CarriedRedaction:
    """Redacts a byte stream fed in pieces: an end of a piece that begins some form of a secret waits for
    the next piece (or the end), unless a whole form ends past it; the rest goes out at once."""

    def __init__(self, redactor: Redactor) -> None:
        self._redactor = redactor
        self._carry = b""

    def feed(self, data: bytes) -> bytes:
        buffer = self._carry + data
        cut = len(buffer) - self._redactor.unfinished(buffer)
        for start, end in self._redactor.spans(buffer):
            if start < cut < end:
                cut = end
        self._carry = buffer[cut:]
        return self._redactor.bytes(buffer[:cut])

    def flush(self) -> bytes:
        rest, self._carry = self._carry, b""
        return self._redactor.bytes(rest)


class _Followed:
    def __init__(self, redactor: Redactor) -> None:
        self.offset = 0
        self.redaction = CarriedRedaction(redactor)
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")


def _redacted(node: Any, redactor: Redactor) -> Any:
    if isinstance(node, str):
        return redactor.text(node)
    if isinstance(node, dict):
        return {redactor.text(str(key)): _redacted(value, redactor) for key, value in node.items()}
    if isinstance(node, list):
        return [_redacted(item, redactor) for item in node]
    return node


def _cut(node: Any, chars: int) -> Any:
    if isinstance(node, str) and len(node) > chars:
        return f"{node[:chars]}… [{len(node) - chars} more characters in the artifacts]"
    if isinstance(node, dict):
        return {key: _cut(value, chars) for key, value in node.items()}
    if isinstance(node, list):
        kept = [_cut(item, chars) for item in node[:_LIST_CUT]]
        return kept + ([f"[{len(node) - _LIST_CUT} more in the artifacts]"] if len(node) > _LIST_CUT else [])
    return node


def step_text(step: Any, redactor: Redactor, limit: int) -> str:
    """One trajectory step as JSON of at most `limit` bytes: every string redacted first (so no cut can
    leave part of a secret), then cut shorter until it fits; a step that never does says so."""
    clean = _redacted(step, redactor)
    for chars in (None, *_STRING_CUTS):
        shown = clean if chars is None else _cut(clean, chars)
        text = json.dumps(shown, ensure_ascii=False, separators=(",", ":"))
        # The serialised text is redacted again: a form only a whole document shows (an encoding).
        text = redactor.text(text) or ""
        if len(text.encode()) <= limit:
            return text
    source = clean.get("source") if isinstance(clean, dict) else None
    placeholder = {"message": "(this step is too large to show live: it is in the artifacts)"}
    if isinstance(source, str) and len(source) <= 64:
        placeholder["source"] = source
    return json.dumps(placeholder)


def step_texts(data: bytes, redactor: Redactor, limit: int) -> list[str] | None:
    """The steps of an ATIF trajectory as `step_text`s; None while it is not one (half written, say)."""
    try:
        document = json.loads(data)
    except ValueError:
        return None
    steps = document.get("steps") if isinstance(document, dict) else None
    if not isinstance(steps, list):
        return None
    return [step_text(step, redactor, limit) for step in steps[:MAX_STEPS]]


def _read_steps(
    folder: Folder, redactor: Redactor, limit: int, previous: tuple[int, int] | None
) -> tuple[list[tuple[str, bytes]] | None, tuple[int, int] | None]:
    """The trajectory's steps and their digests, unless its stamp is still `previous` (then None)."""
    data, stamp = folder.read_whole(TRAJECTORY_FILE, _TRAJECTORY_MAX_BYTES)
    if data is None or stamp == previous:
        return None, stamp
    texts = step_texts(data, redactor, limit)
    if texts is None:
        return None, stamp
    return [(text, hashlib.sha256(text.encode()).digest()) for text in texts], stamp


class _Trajectory:
    """What was last seen of the trajectory file and sent of its steps (a digest per step index)."""

    def __init__(self) -> None:
        self.stamp: tuple[int, int] | None = None
        self.read_at = float("-inf")
        self.steps: list[tuple[str, bytes]] = []
        self.sent: dict[int, bytes] = {}


class LiveOutput:
    """One attempt's forwarder: `tick()` sends what is new within the budget, `phase()` the trial's phase."""

    def __init__(
        self,
        publish: Publish,
        folder: Path,
        redactor: Redactor,
        budget: Budget,
        clock: Callable[[], float] = time.monotonic,
        verifier_folder: Path | None = None,
    ) -> None:
        self._publish = publish
        self._clock = clock
        self._folder = HostFolder(folder)
        # Followed once the verifier runs, where a sandbox is read (the verifier's folder on the host holds
        # its logs only once brought back).
        self._verifier_folder = HostFolder(verifier_folder) if verifier_folder is not None else None
        # The sandbox's copies of the folders (live_sources.py), set once the environment exists.
        self.sandbox: SandboxPoll | None = None
        self._phase: Phase = "setup"
        self._redactor = redactor
        self.budget = budget
        self._files: dict[str, _Followed] = {}
        self._trajectory = _Trajectory()
        self._pushed: dict[str, bytearray] = {}
        self._dropped: dict[str, int] = {}
        self._seq = 0
        self._truncated = False

    async def _send(self, **fields: object) -> None:
        chunk = LiveChunk(seq=self._seq, at=datetime.now(UTC).isoformat(), **fields)  # type: ignore[arg-type]
        self._seq += 1
        try:
            await self._publish(chunk.model_dump_json(exclude_defaults=True).encode())
        except Exception as error:  # a watcher's view, never a reason for the attempt to fail
            log.warning("live output not sent: %r", error)

    async def phase(self, phase: Phase) -> None:
        self._phase = phase
        await self._send(phase=phase)

    def _trajectory_folder(self, final: bool) -> Folder:
        copy = self.sandbox.copy("agent") if self.sandbox is not None and not final else None
        # A harness driving the sandbox from this host (terminus-2) writes its trajectory here.
        return copy if copy is not None and TRAJECTORY_FILE in copy.files else self._folder

    def _log_files(self, final: bool) -> list[tuple[str, Folder, str]]:
        """(name sent, folder, name in it) of each log file followed now. A sandbox's copy of a folder
        answers for the names it holds: the host's copy of them is brought back from it at the end."""
        sandbox = self.sandbox if not final else None
        folders: list[tuple[str, Folder, CopiedFolder | None]] = [
            ("", self._folder, sandbox.copy("agent") if sandbox is not None else None)
        ]
        if self._verifier_folder is not None and self._phase in ("verifier", "done"):
            copy = sandbox.copy("verifier") if sandbox is not None else None
            folders.append(("verifier/", self._verifier_folder, copy))
        found: list[tuple[str, Folder, str]] = []
        for prefix, host, copy in folders:
            copied = set(copy.names()) if copy is not None else set()
            for name in sorted(set(host.names()) | copied):
                source = copy if copy is not None and name in copied else host
                found.append((prefix + name, source, name))
        return found[:FOLLOWED]

    async def tick(self, final: bool = False) -> None:
        if self._truncated:
            return
        if self.sandbox is not None and not final:
            try:
                await self.sandbox.refresh()
            except Exception as error:  # a watcher's view, never a reason for the attempt to fail
                log.warning("the sandbox's logs not read: %r", error)
        await self._trajectory_steps(final)
        if self._truncated:
            return
        await self._pushed_output(final)
        if self._truncated:
            return
        for name, folder, name_in in self._log_files(final):
            followed = self._files.setdefault(name, _Followed(self._redactor))
            allowance = self.budget.allowance()
            data, size = folder.read_new(name_in, followed.offset, allowance)
            if 0 <= size < followed.offset:
                # Shorter than what was read: rewritten (the sandbox's copy brought back redacted, say).
                # Followed from its new end: what it held before has been sent.
                followed.offset = size
            followed.offset += len(data)
            out = followed.redaction.feed(data)
            if final:
                out += followed.redaction.flush()
            cut = await self._forward(name, followed, len(data), out, final)
            if cut or ((self.budget.exhausted or final) and size > followed.offset):
                self._truncated = True
                await self._send(truncated=True)
                return

    async def _forward(self, name: str, followed: _Followed, read: int, out: bytes, final: bool) -> bool:
        """Send `out` (redacted text of `read` bytes read) as far as the budget's total allows, in
        chunks; whether it was cut."""
        remaining = self.budget.total - self.budget.sent
        cut, out = len(out) > remaining, out[:remaining]
        self.budget.spend(max(read, len(out)))
        text = followed.decoder.decode(out, final=final)
        for start in range(0, len(text), CHUNK_BYTES):
            await self._send(file=name, text=text[start : start + CHUNK_BYTES])
        return cut

    async def command_output(self, entry: Any) -> None:
        """Harbor's log callback (harbor.trial.hooks.LogEntry): the agent's commands' output as printed."""
        if entry.phase != "agent" or entry.stream not in ("stdout", "stderr") or self._truncated:
            return
        name = f"{entry.stream} of the agent's commands"
        data = str(entry.text).encode("utf-8", "replace")
        held = self._pushed.setdefault(name, bytearray())
        if name in self._dropped or len(held) + len(data) > _PUSHED_MAX:
            self._dropped[name] = self._dropped.get(name, 0) + len(data)
            return
        held += data

    async def _pushed_output(self, final: bool) -> None:
        for name, held in self._pushed.items():
            followed = self._files.setdefault(name, _Followed(self._redactor))
            take = min(len(held), self.budget.allowance())
            data = bytes(held[:take])
            del held[:take]
            out = followed.redaction.feed(data)
            dropped = self._dropped.get(name) if not held else None
            if dropped is not None:
                # What the redaction held back may begin a secret whose rest was dropped: it goes too.
                followed.redaction = CarriedRedaction(self._redactor)
                del self._dropped[name]
                out += f"\n[{dropped} bytes not shown live]\n".encode()
            elif final:
                out += followed.redaction.flush()
            cut = await self._forward(name, followed, len(data), out, final)
            if cut or ((self.budget.exhausted or final) and held):
                self._truncated = True
                await self._send(truncated=True)
                return

    async def _trajectory_steps(self, final: bool) -> None:
        """Send the trajectory's steps that are new or changed, in order, while the budget allows; a step
        the rate does not allow yet waits for a later tick (or the end)."""
        seen = self._trajectory
        now = self._clock()
        if final or now - seen.read_at >= _TRAJECTORY_EVERY:
            seen.read_at = now
            limit = min(CHUNK_BYTES, self.budget.rate)
            # Parsed and redacted off the loop: other attempts' forwarders share it.
            steps, stamp = await asyncio.to_thread(
                _read_steps, self._trajectory_folder(final), self._redactor, limit, seen.stamp
            )
            if steps is not None:
                seen.stamp, seen.steps = stamp, steps
        for index, (text, digest) in enumerate(seen.steps):
            if seen.sent.get(index) == digest:
                continue
            size = len(text.encode())
            if size > self.budget.total - self.budget.sent or (final and size > self.budget.allowance()):
                self._truncated = True
                await self._send(truncated=True)
                return
            if size > self.budget.allowance():
                return
            self.budget.spend(size)
            seen.sent[index] = digest
            await self._send(file=TRAJECTORY_FILE, step=index, text=text)

    async def follow(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            await self.tick()


@contextlib.asynccontextmanager
async def forwarding(live: LiveOutput, interval: float) -> AsyncIterator[LiveOutput]:
    """Follow the folder while the body runs; once it returns, send the rest (within the caps) and `done`."""
    task = asyncio.create_task(live.follow(interval))
    try:
        yield live
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    await live.tick(final=True)
    await live.phase("done")
