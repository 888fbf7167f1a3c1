"""Issue 38, Watch under the `container` environment: the agent's log folder (the oracle's `oracle.txt`, an
ATIF trajectory.json written in the container) and the verifier's are inside the container until the
attempt ends, yet a watcher of the live endpoint gets their lines and steps while the attempt runs,
redacted; and the executor reads the container's folders only while someone watches (engine events)."""

from __future__ import annotations

import json
import re
import secrets
import threading
import time
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest
from regatta_executor.container.engine import LABEL_OWNERS, engine_answers

from tests.conftest import unavailable
from tests.e2e.test_container_stack import container_stack
from tests.e2e.web_ui_support import ACK_WAIT, add_folder_benchmark
from tests.support.tasks import write_task

pytestmark = pytest.mark.timeout(400)

SECRET = "csk-" + secrets.token_hex(12)
# A line and a one-step trajectory at once; the secret split across two writes; a quiet stretch (its
# start and end printed); then a line and a second step (the secret JSON-escaped in it) written well after
# any watcher opened, and a wait before the attempt ends.
SOLVE = """echo "first line from the agent"
HEAD='"schema_version": "ATIF-v1.6", "session_id": "w"'
STEP1='{"step_id": 1, "source": "user", "message": "Write done to /app/out.txt"}'
printf '{%s, "steps": [%s]}' "$HEAD" "$STEP1" > /logs/agent/trajectory.json
printf 'the key is %s' "${WATCH_TOKEN:0:12}"
sleep 1.5
printf '%s and more\\n' "${WATCH_TOKEN:12}"
echo "quiet from $(date +%s.%N)"
sleep 8
echo "second line written at $(date +%s.%N)"
KEY="${WATCH_TOKEN:0:3}\\u002d${WATCH_TOKEN:4}"
STEP2=$(printf '{"step_id": 2, "source": "agent", "message": "step written at %s with key %s"}' \\
  "$(date +%s.%N)" "$KEY")
printf '{%s, "steps": [%s, %s]}' "$HEAD" "$STEP1" "$STEP2" > /logs/agent/trajectory.json
sleep 8
echo done > /app/out.txt"""
# The verifier prints, then takes its time before the reward.
TEST = """#!/bin/bash
echo "the verifier looks at $(date +%s.%N)"
sleep 5
if grep -q done /app/out.txt 2>/dev/null; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
"""


@pytest.fixture
def engine() -> docker.DockerClient:
    if not engine_answers():
        unavailable("no Docker engine answers (scripts/services.sh starts one)")
    return docker.from_env()


def submission(benchmark: str) -> dict[str, Any]:
    return {
        "name": f"watch-{benchmark}-{secrets.token_hex(3)}",
        "experiment_config": {"benchmark": benchmark},
        "agents": [{"harness": "oracle", "model": {"type": "hosted", "base_model": "none"}}],
        "execution_config": {"attempts_per_task": 1},
        "secrets": {"required": ["WATCH_TOKEN"], "provided": {"WATCH_TOKEN": SECRET}},
    }


class EngineEvents:
    """The engine's events for the stack's containers, collected as they happen (the engine keeps only
    its last few hundred, which other tests on the machine would push out): (time, container, action)."""

    def __init__(self, engine: docker.DockerClient, owners: str) -> None:
        self.seen: list[tuple[float, str, str]] = []
        self._stream = engine.api.events(
            decode=True, filters={"type": "container", "label": f"{LABEL_OWNERS}={owners}"}
        )
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for event in self._stream:
                at = int(event.get("timeNano") or 0) / 1e9
                self.seen.append((at, str(event.get("id")), str(event.get("Action") or event.get("status"))))
        except Exception:  # the stream closed at the test's end
            return

    def reads(self, start: float, end: float) -> int:
        """Archive reads of any of the stack's containers between `start` and `end` (this host's clock)."""
        return sum(1 for at, _, action in self.seen if action == "archive-path" and start <= at <= end)

    def close(self) -> None:
        self._stream.close()


class Watcher:
    """The attempt's live endpoint read in a thread: its events as they came, each with the attempt's
    outcome as the API said it just before it was read."""

    def __init__(self, api: Any, run_id: str, attempt_id: str) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.received: list[float] = []  # when each event came (this host's clock)
        self.raw = ""
        self.opened = time.time()
        self._client = httpx.Client(base_url=api.http.base_url, headers=api.http.headers, timeout=None)
        self._path = f"/api/v1/runs/{run_id}/attempts/{attempt_id}/live"
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        with self._client.stream("GET", self._path) as response:
            name = ""
            for line in response.iter_lines():
                self.raw += line + "\n"
                if line.startswith("event: "):
                    name = line[len("event: ") :]
                elif line.startswith("data: "):
                    self.events.append((name, json.loads(line[len("data: ") :])))
                    self.received.append(time.time())

    def received_at(self, name: str, needle: str) -> float:
        """When the first `name` event whose data holds `needle` came."""
        for (event, data), at in zip(self.events, self.received, strict=True):
            if event == name and needle in json.dumps(data):
                return at
        raise AssertionError(f"no {name} event with {needle!r}: {self.events}")

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)
        self._client.close()

    def before(self, event: str, **fields: object) -> list[tuple[str, dict[str, Any]]]:
        """The events that came before the first `event` with `fields` (all of them if none came)."""
        for index, (name, data) in enumerate(self.events):
            if name == event and all(data.get(k) == v for k, v in fields.items()):
                return self.events[:index]
        return list(self.events)


def text_of(events: list[tuple[str, dict[str, Any]]], file: str) -> str:
    return "".join(d["text"] for n, d in events if n == "output" and d["file"] == file)


def quiet_window(text: str) -> tuple[float, float]:
    start = float(re.search(r"quiet from ([0-9.]+)", text)[1])
    end = float(re.search(r"second line written at ([0-9.]+)", text)[1])
    return start, end


def test_a_container_attempts_output_steps_and_verifier_are_live_while_watched(
    engine: docker.DockerClient, make_stack, api_for, tmp_path: Path
) -> None:
    stack, owners = container_stack(make_stack, tmp_path, **ACK_WAIT)
    api = api_for(stack)
    task = write_task(tmp_path / "watch", "watch-000", solve=SOLVE)
    (task / "tests" / "test.sh").write_text(TEST)
    add_folder_benchmark(api, tmp_path / "watch", "watch")
    api.benchmark_ready("watch")
    events = EngineEvents(engine, owners)
    try:
        # Unwatched: the folders are read once the attempt ends (the LIVE stream has them then), but
        # never while it runs.
        quiet_run = api.http.post("/api/v1/runs", json=submission("watch")).json()["id"]
        assert api.wait_run(quiet_run, timeout=240)["benchmark_run"]["status"] == "finished"
        attempt = api.get(f"/runs/{quiet_run}/attempts")["attempts"][0]
        assert attempt["outcome"] == "passed", attempt
        replay = Watcher(api, quiet_run, attempt["attempt_id"])
        replay.join(60)
        unwatched = text_of(replay.events, "oracle.txt")
        assert "first line from the agent" in unwatched and "the key is [REDACTED] and more" in unwatched
        start, end = quiet_window(unwatched)
        assert events.reads(start, end) == 0, events.seen

        # Watched from the moment the attempt runs.
        run_id = api.http.post("/api/v1/runs", json=submission("watch")).json()["id"]
        running = api.wait_for(
            lambda: next(
                (a for a in api.get(f"/runs/{run_id}/attempts")["attempts"] if a["status"] == "running"),
                None,
            ),
            timeout=120,
        )
        watcher = Watcher(api, run_id, running["attempt_id"])
        assert api.wait_run(run_id, timeout=240)["benchmark_run"]["status"] == "finished"
        watcher.join(60)
    finally:
        events.close()

    # While the agent still ran (the host's copy of its folder comes only after its turn, before the
    # verifier's phase).
    live = watcher.before("phase", phase="verifier")
    shown = text_of(live, "oracle.txt")
    # The agent's lines, one written well after the watcher came.
    assert "first line from the agent" in shown, watcher.events
    assert "the key is [REDACTED] and more" in shown
    start, end = quiet_window(shown)
    assert end > watcher.opened + 5, (end, watcher.opened)
    # ...shown while the agent still ran: it ends 8 s after writing it, and a quiet folder is read every
    # 5 s at most (docs/performance.md), plus a read's own time on a loaded machine.
    assert watcher.received_at("output", "second line written at") < end + 7, (watcher.received, end)
    # Its trajectory's steps, the second (written after the watcher came) with its escaped key redacted.
    steps = {d["index"]: d["step"] for n, d in live if n == "step"}
    assert steps[0]["message"] == "Write done to /app/out.txt", steps
    written = float(re.search(r"step written at ([0-9.]+)", steps[1]["message"])[1])
    assert written > watcher.opened + 5 and steps[1]["message"].endswith("with key [REDACTED]"), steps
    assert watcher.received_at("step", "step written at") < written + 7, (watcher.received, written)
    # The verifier's output, before the reward was known.
    verifying = watcher.before("status", status="finished")
    assert "the verifier looks at" in text_of(verifying, "verifier/test-stdout.txt"), watcher.events
    looked = float(re.search(r"the verifier looks at ([0-9.]+)", watcher.raw)[1])
    assert watcher.received_at("output", "the verifier looks at") < looked + 4  # it takes 5 s more
    assert [d["phase"] for n, d in watcher.events if n == "phase"] == ["setup", "agent", "verifier", "done"]
    # Never a secret, nor either half of it.
    for fragment in (SECRET, SECRET[:12], SECRET[12:], SECRET[4:]):
        assert fragment not in watcher.raw
    # While watched, the container's folders were read during the quiet stretch (every 1 s, up to 5 s
    # apart while nothing changes).
    assert events.reads(start, end) >= 2, events.seen
