"""Attempt files go to the NATS object store by content digest; a digest stored once is not checked or
sent again by the same executor (artifacts.py)."""

from __future__ import annotations

from pathlib import Path

import nats
import pytest
from regatta_executor import artifacts
from regatta_shared.bus import ARTIFACTS_BUCKET, ensure_streams

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
