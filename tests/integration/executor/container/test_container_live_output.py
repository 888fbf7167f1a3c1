"""Issue 30, Watch, under the `container` environment: the agent's log folder is inside the container until
the attempt ends, so what its commands print is streamed from the engine as they print it (Harbor's output
callback), redacted and capped by the executor's live forwarder, before the command ends."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import docker
import pytest
from harbor.trial.hooks import LogEntry
from regatta_executor.attempt.live_output import Budget, LiveOutput, forwarding
from regatta_executor.attempt.redaction import REDACTED, Redactor
from regatta_shared.messaging.live import LiveChunk

from tests.integration.container_support import started_environment

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("built_images_removed")]
SECRET = "csk-" + uuid.uuid4().hex
# A line, a secret, then nothing more until the test has seen both (a file the test makes), then a last one.
COMMAND = f"""echo "a line written mid-command"; echo "key {SECRET} on stderr" >&2
while [ ! -e /tmp/go ]; do sleep 0.1; done
echo "the last line" """


async def test_a_line_printed_mid_command_is_forwarded_before_the_command_ends(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    sent: list[LiveChunk] = []
    seen = asyncio.Event()

    async def publish(payload: bytes) -> None:
        sent.append(LiveChunk.model_validate_json(payload))
        shown = "".join(c.text for c in sent)
        if "a line written mid-command" in shown and "on stderr" in shown:
            seen.set()

    live = LiveOutput(publish, tmp_path / "no-folder", Redactor([SECRET]), Budget(65536, 1 << 20))
    trial_id = uuid.uuid4()

    async def on_output(text: str, stream: str) -> None:
        # What Harbor's Trial hands its log callbacks for the agent's phase (trial.add_log_callback).
        await live.command_output(LogEntry(trial_id=trial_id, phase="agent", stream=stream, text=text))

    async with started_environment(tmp_path) as env, forwarding(live, 0.05):
        with env.scoped_output_callback(on_output):
            command = asyncio.create_task(env.exec(COMMAND))
        await asyncio.wait_for(seen.wait(), timeout=120)
        assert not command.done(), "forwarded while the command still runs"
        await env.exec("touch /tmp/go")  # outside the callback's scope: not the agent's output
        result = await command
    assert result.return_code == 0
    assert result.stdout == "a line written mid-command\nthe last line\n"  # the result is whole too
    assert result.stderr == f"key {SECRET} on stderr\n"
    by_file: dict[str, str] = {}
    for chunk in sent:
        if chunk.text:
            by_file[chunk.file or ""] = by_file.get(chunk.file or "", "") + chunk.text
    assert by_file == {
        "stdout of the agent's commands": "a line written mid-command\nthe last line\n",
        "stderr of the agent's commands": f"key {REDACTED} on stderr\n",
    }
    assert SECRET not in "".join(c.model_dump_json() for c in sent)
    assert sent[-1].phase == "done" and not any(c.truncated for c in sent)
