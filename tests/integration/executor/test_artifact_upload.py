"""Attempt files go to the NATS object store by content digest; a digest stored once is not checked or
sent again by the same executor (artifacts.py)."""

from __future__ import annotations

from pathlib import Path

import nats
import pytest
from regatta_executor.attempt import artifacts
from regatta_shared.messaging.bus import ARTIFACTS_BUCKET, ensure_streams

pytestmark = pytest.mark.timeout(60)


def _trial(folder: Path, reward: str) -> Path:
    (folder / "verifier").mkdir(parents=True)
    (folder / "agent").mkdir()
    (folder / "verifier" / "reward.txt").write_text(reward)
    (folder / "agent" / "oracle.txt").write_text("")
    (folder / "result.json").write_text(f'{{"reward": {reward}}}')
    return folder


async def test_a_digest_stored_once_is_neither_checked_nor_sent_again(nats_url: str, tmp_path: Path) -> None:
    nc = await nats.connect(nats_url)
    try:
        await ensure_streams(nc.jetstream())
        store = await nc.jetstream().object_store(ARTIFACTS_BUCKET)
        calls: list[str] = []
        for name in ("get_info", "put"):
            original = getattr(store, name)

            async def counted(*args, _original=original, _name=name, **kwargs):  # type: ignore[no-untyped-def]
                calls.append(_name)
                return await _original(*args, **kwargs)

            setattr(store, name, counted)
        marker = tmp_path.name  # unique content per test run: the bucket outlives it
        first = await artifacts.upload(store, _trial(tmp_path / "a", f"1{marker}"))
        first_calls = len(calls)
        second = await artifacts.upload(store, _trial(tmp_path / "b", f"1{marker}"))
        assert [(r.path, r.digest) for r in first] == [(r.path, r.digest) for r in second]
        assert first_calls >= 3 and len(calls) == first_calls, "the same files cost no round trip again"
        third = await artifacts.upload(store, _trial(tmp_path / "c", f"0{marker}"))
        before = {r.path: r.digest for r in first}
        assert {r.path for r in third if before.get(r.path) != r.digest} == {
            "verifier/reward.txt",
            "result.json",
        }
        assert calls[first_calls:].count("put") == 2, "only the new contents are sent"
        for ref in third:
            assert (await store.get(ref.digest)).data == (tmp_path / "c" / ref.path).read_bytes()
    finally:
        await nc.close()


async def test_step_outputs_are_kept_redacted_and_bounded_like_the_rest(
    nats_url: str, tmp_path: Path
) -> None:
    """A multi-step trial's steps/<name>/ files go up as the rest do: every secret value replaced, and
    within MAX_FILES, which the trial's own files come first in (a step's flood cannot push them out)."""
    secret = f"sk-{tmp_path.name}-0123456789"
    trial = _trial(tmp_path / "steps", "1")
    (trial / "exception.txt").write_text("the whole error\n")
    step = trial / "steps" / "first"
    (step / "agent").mkdir(parents=True)
    (step / "agent" / "echo.txt").write_text(f"judge key {secret}\n")
    for index in range(artifacts.MAX_FILES + 20):
        (step / "agent" / f"flood-{index:03}.txt").write_text(f"{index}\n")
    nc = await nats.connect(nats_url)
    try:
        await ensure_streams(nc.jetstream())
        store = await nc.jetstream().object_store(ARTIFACTS_BUCKET)
        refs = {ref.path: ref for ref in await artifacts.upload(store, trial, [secret])}
        assert len(refs) == artifacts.MAX_FILES
        assert {"result.json", "exception.txt", "verifier/reward.txt", "agent/oracle.txt"} <= set(refs)
        stored = (await store.get(refs["steps/first/agent/echo.txt"].digest)).data
        assert secret.encode() not in stored and stored.startswith(b"judge key "), stored
        assert "steps/first/agent/flood-000.txt" in refs
    finally:
        await nc.close()
