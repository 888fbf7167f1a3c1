"""An attempt's live output in the executor (issue 30, Watch): a secret split across reads never goes
out, the agent's folder is read as hostile, and the rate and total caps hold, whatever the agent writes."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import uuid
from pathlib import Path

from harbor.trial.hooks import LogEntry
from hypothesis import given, settings
from hypothesis import strategies as st
from regatta_executor.attempt.live_output import Budget, CarriedRedaction, LiveOutput, forwarding
from regatta_executor.attempt.redaction import REDACTED, Redactor, forms
from regatta_shared.messaging.live import LiveChunk

SECRET = "sk-live-0123456789abcdef"
TEXT = st.text(alphabet="abc-kls01 \n\"'", max_size=60)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def forward(folder: Path, secrets: list[str], budget: Budget) -> tuple[LiveOutput, list[LiveChunk]]:
    sent: list[LiveChunk] = []

    async def publish(payload: bytes) -> None:
        sent.append(LiveChunk.model_validate_json(payload))

    return LiveOutput(publish, folder, Redactor(secrets), budget), sent


@settings(max_examples=300, deadline=None)
@given(before=TEXT, after=TEXT, cuts=st.lists(st.integers(0, 200), max_size=4), which=st.integers(0, 200))
def test_a_secret_split_across_pieces_never_goes_out(
    before: str, after: str, cuts: list[int], which: int
) -> None:
    every = sorted(forms(SECRET), key=len)
    form = every[which % len(every)]
    stream = before.encode() + form + after.encode()
    points = sorted({min(c, len(stream)) for c in cuts})
    pieces = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    redaction = CarriedRedaction(Redactor([SECRET]))
    out = b"".join(redaction.feed(piece) for piece in pieces) + redaction.flush()
    assert not [f for f in forms(SECRET) if len(f) >= 8 and f in out], out
    assert REDACTED.encode() in out


def test_what_cannot_begin_a_secret_goes_out_at_once() -> None:
    redaction = CarriedRedaction(Redactor([SECRET]))
    assert redaction.feed(b"a whole line\n") == b"a whole line\n"
    assert redaction.feed(b"the key is sk-li") == b"the key is "  # the rest may be the secret
    assert redaction.feed(b"ve-0123456789abcdef and more\n") == REDACTED.encode() + b" and more\n"
    assert redaction.feed(b"sk-l") == b""
    assert redaction.flush() == b"sk-l"  # the end: it was not the secret


def test_links_fifos_and_folders_in_the_agent_folder_are_not_read(tmp_path: Path) -> None:
    outside = tmp_path / "executor-key"
    outside.write_text("the executor's own file\n")
    agent = tmp_path / "agent"
    agent.mkdir()
    (agent / "link.txt").symlink_to(outside)
    os.mkfifo(agent / "pipe.txt")
    (agent / "folder.txt").mkdir()
    (agent / "trajectory.json").write_text('{"steps": []}')
    (agent / "agent.log").write_text("the agent's own line\n")
    live, sent = forward(agent, [], Budget(65536, 1 << 20))
    asyncio.run(live.tick(final=True))
    assert [(c.file, c.text) for c in sent] == [("agent.log", "the agent's own line\n")]


def test_a_chatty_agent_gets_the_rate_and_then_the_cap(tmp_path: Path) -> None:
    clock = Clock()
    (tmp_path / "out.txt").write_bytes(b"x" * 5_000_000)
    live, sent = forward(tmp_path, [], Budget(64 * 1024, 256 * 1024, clock))
    per_second = []
    for _ in range(10):
        before = sum(len(c.text) for c in sent)
        asyncio.run(live.tick())
        per_second.append(sum(len(c.text) for c in sent) - before)
        clock.now += 1.0
    assert max(per_second) <= 64 * 1024
    assert sum(per_second) == 256 * 1024
    assert [c.truncated for c in sent].count(True) == 1 and sent[-1].truncated
    assert max(len(c.text) for c in sent) <= 16 * 1024


def test_the_forwarder_sends_the_rest_and_done_when_the_trial_ends(tmp_path: Path) -> None:
    live, sent = forward(tmp_path, [SECRET], Budget(65536, 1 << 20))

    async def trial() -> None:
        async with forwarding(live, 0.05):
            (tmp_path / "oracle.txt").write_text(f"working\nkey {SECRET[:6]}")
            await asyncio.sleep(0.2)
            with (tmp_path / "oracle.txt").open("a") as log:
                log.write(SECRET[6:])  # the last write, no newline: flushed at the end

    asyncio.run(trial())
    assert "".join(c.text for c in sent) == f"working\nkey {REDACTED}"
    assert sent[-1].phase == "done" and not any(c.truncated for c in sent)
    assert json.dumps([c.model_dump() for c in sent]).count(SECRET[:6]) == 0


def test_a_log_rewritten_shorter_is_followed_from_its_new_end(tmp_path: Path) -> None:
    log = tmp_path / "oracle.txt"
    log.write_text(f"key {SECRET}\n")
    live, sent = forward(tmp_path, [SECRET], Budget(65536, 1 << 20))
    asyncio.run(live.tick())
    log.write_text(f"key {REDACTED}\n")  # what the sandbox's copy brings back at its end
    asyncio.run(live.tick())
    with log.open("a") as more:
        more.write("later\n")
    asyncio.run(live.tick(final=True))
    assert "".join(c.text for c in sent) == f"key {REDACTED}\nlater\n"
    assert not any(c.truncated for c in sent)


def trajectory(*steps: dict[str, object]) -> str:
    return json.dumps({"schema_version": "ATIF-v1.6", "session_id": "s", "steps": list(steps)}, indent=2)


def sent_steps(sent: list[LiveChunk]) -> list[tuple[int, dict[str, object]]]:
    return [(c.step, json.loads(c.text)) for c in sent if c.step is not None]


def test_trajectory_steps_go_out_as_they_are_written_and_again_when_they_change(tmp_path: Path) -> None:
    clock = Clock()
    file = tmp_path / "trajectory.json"
    user = {"step_id": 1, "source": "user", "message": "Write done"}
    agent = {"step_id": 2, "source": "agent", "message": "I will write it."}
    live, sent = forward(tmp_path, [], Budget(65536, 1 << 20, clock))
    live = LiveOutput(live._publish, tmp_path, Redactor([]), live.budget, clock)
    file.write_text(trajectory(user))
    asyncio.run(live.tick())
    assert sent_steps(sent) == [(0, user)]
    file.write_text(trajectory(user, agent)[:-3])  # half written: not a trajectory yet
    clock.now += 1.0
    asyncio.run(live.tick())
    assert sent_steps(sent) == [(0, user)]
    file.write_text(trajectory(user, agent))
    clock.now += 1.0
    asyncio.run(live.tick())
    assert sent_steps(sent) == [(0, user), (1, agent)]  # the first step is not sent again
    observed = {**agent, "observation": {"results": [{"content": "done"}]}}
    file.write_text(trajectory(user, observed))
    clock.now += 1.0
    asyncio.run(live.tick(final=True))
    assert sent_steps(sent) == [(0, user), (1, agent), (1, observed)]
    assert all(c.file == "trajectory.json" for c in sent if c.step is not None)
    assert not any(c.truncated for c in sent)


@settings(max_examples=100, deadline=None)
@given(which=st.integers(0, 200), pad=st.integers(0, 40_000))
def test_a_secret_in_a_trajectory_step_never_goes_out(which: int, pad: int) -> None:
    # Written as the agent's JSON may hold it: plain, escaped or encoded, in a message or a tool call,
    # past the point a long step is cut at or before it.
    every = sorted(f for f in forms(SECRET) if b'"' not in f and b"\\" not in f)
    form = every[which % len(every)].decode()
    step = {
        "source": "agent",
        "message": "x" * pad + f"the key is {form}",
        "tool_calls": [{"function_name": "bash", "arguments": {"command": f"echo {SECRET}"}}],
    }
    escaped = json.dumps({"steps": [step]}, ensure_ascii=True).replace(
        SECRET[3:9], "\\u00" + "\\u00".join(format(ord(c), "02x") for c in SECRET[3:9])
    )
    assert json.loads(escaped)["steps"][0]["tool_calls"][0]["arguments"]["command"] == f"echo {SECRET}"
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "trajectory.json").write_text(escaped)
        live, sent = forward(Path(folder), [SECRET], Budget(65536, 1 << 20))
        asyncio.run(live.tick(final=True))
    [(_, shown)] = sent_steps(sent)
    out = json.dumps([c.model_dump() for c in sent]).encode() + b"".join(c.text.encode() for c in sent)
    assert not [f for f in forms(SECRET) if len(f) >= 8 and f in out], form
    assert REDACTED in json.dumps(shown)
    assert all(len(c.text.encode()) <= 16 * 1024 for c in sent)


def test_a_huge_step_is_cut_to_one_message_and_stays_json(tmp_path: Path) -> None:
    big = {"source": "agent", "message": "m" * 100_000, "observation": {"results": [{"content": "o"}] * 500}}
    (tmp_path / "trajectory.json").write_text(trajectory(big))
    live, sent = forward(tmp_path, [], Budget(65536, 1 << 20))
    asyncio.run(live.tick(final=True))
    [(_, shown)] = sent_steps(sent)
    assert shown["source"] == "agent" and str(shown["message"]).startswith("mmmm")
    assert "more characters in the artifacts" in str(shown["message"])
    assert len(next(c for c in sent if c.step is not None).text.encode()) <= 16 * 1024


def test_a_linked_or_oversized_trajectory_is_not_read(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.json"
    outside.write_text(trajectory({"source": "user", "message": "the executor's own file"}))
    agent = tmp_path / "agent"
    agent.mkdir()
    (agent / "trajectory.json").symlink_to(outside)
    live, sent = forward(agent, [], Budget(65536, 1 << 20))
    asyncio.run(live.tick(final=True))
    assert sent_steps(sent) == []
    (agent / "trajectory.json").unlink()
    (agent / "trajectory.json").write_text(trajectory({"source": "user", "message": "y" * (9 << 20)}))
    live, sent = forward(agent, [], Budget(65536, 1 << 20))
    asyncio.run(live.tick(final=True))
    assert sent_steps(sent) == []


def test_trajectory_steps_keep_to_the_rate_and_the_cap(tmp_path: Path) -> None:
    clock = Clock()
    steps = [{"source": "agent", "message": f"{i:04d}" + "s" * 3000} for i in range(200)]
    (tmp_path / "trajectory.json").write_text(trajectory(*steps))
    live, sent = forward(tmp_path, [], Budget(16 * 1024, 64 * 1024, clock))
    live = LiveOutput(live._publish, tmp_path, Redactor([]), live.budget, clock)
    per_second = []
    for _ in range(8):
        before = sum(len(c.text.encode()) for c in sent)
        asyncio.run(live.tick())
        per_second.append(sum(len(c.text.encode()) for c in sent) - before)
        clock.now += 1.0
    assert max(per_second) <= 16 * 1024
    assert 60 * 1024 <= sum(per_second) <= 64 * 1024
    indexes = [i for i, _ in sent_steps(sent)]
    assert indexes == list(range(len(indexes)))  # in order, none twice
    assert [c.truncated for c in sent].count(True) == 1 and sent[-1].truncated


def test_command_output_is_held_within_bounds_and_never_leaks_a_cut_secret(tmp_path: Path) -> None:
    clock = Clock()
    live, sent = forward(tmp_path, [SECRET], Budget(64 * 1024, 1 << 20, clock))

    def entry(text: str, phase: str = "agent", stream: str = "stdout") -> LogEntry:
        return LogEntry(trial_id=uuid.uuid4(), phase=phase, stream=stream, text=text)  # type: ignore[arg-type]

    async def scenario() -> None:
        await live.command_output(entry("installing…\n", phase="agent_setup"))  # not the agent's phase
        await live.command_output(entry("hello\n"))
        await live.command_output(entry("oops\n", stream="stderr"))
        await live.tick()
        # Far more than is held for the budget, ending with the start of the secret: the rest is dropped.
        await live.command_output(entry("y" * 200_000))
        await live.command_output(entry("z" * 100_000 + "key " + SECRET[:10]))
        await live.command_output(entry(SECRET[10:] + " gone\n"))
        for _ in range(6):
            clock.now += 1.0
            await live.tick()
        await live.command_output(entry("after the gap\n"))
        await live.tick(final=True)

    asyncio.run(scenario())
    out = {name: "".join(c.text for c in sent if c.file == name) for name in {c.file for c in sent if c.file}}
    assert set(out) == {"stdout of the agent's commands", "stderr of the agent's commands"}
    stdout = out["stdout of the agent's commands"]
    assert stdout.startswith("hello\n" + "y" * 200_000)
    assert "installing" not in stdout and out["stderr of the agent's commands"] == "oops\n"
    assert f"[{100_000 + 14 + len(SECRET) - 10 + 6} bytes not shown live]" in stdout
    assert stdout.endswith("after the gap\n")
    assert SECRET[:10] not in stdout and not any(c.truncated for c in sent)
