"""An attempt's grading as a reader needs it: each reward key once with its value (the primary one marked),
the verifier's output (`verifier/test-stdout.txt`) as text, and per-test results from the task's report
(`verifier/ctrf.json`, else a JUnit XML file under `verifier/`).

The files are the attempt's artifacts, read from the object store by digest. Each was written in the
attempt's sandbox, so none is trusted: its recorded size is checked before a byte is fetched, the output is
shown as plain text (escape sequences dropped, invisible characters spelled out, its tail when long) and
reports are parsed by verifier_reports.py under its own bounds.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import nats.errors
from nats.js.errors import NotFoundError
from regatta_shared.eventstore import EventStore

from regatta_gateway.errors import Unavailable
from regatta_gateway.principals import Scope
from regatta_gateway.queries import benchmarks as benchmark_queries
from regatta_gateway.queries.run_activity import attempt_detail
from regatta_gateway.queries.verifier_reports import (
    MAX_REPORT_BYTES,
    ReportError,
    clean,
    parse_ctrf,
    parse_junit,
)

OUTPUT_PATH = "verifier/test-stdout.txt"
CTRF_PATH = "verifier/ctrf.json"
# The output is read whole up to this size (the executor keeps files up to 20 MiB); past it, the page
# points at the artifact instead of holding it in memory.
MAX_OUTPUT_READ = 8 * 1024 * 1024
# What the page shows of it: the end, where test runners print their summary.
MAX_OUTPUT_SHOWN = 256 * 1024
MAX_REWARD_KEYS = 100
MAX_KEY = 200

Fetch = Callable[[str], Awaitable[bytes | None]]  # digest -> bytes, None when no longer stored


def primary_key_of(rewards: dict[str, Any], primary_key: str | None) -> str | None:
    """The key the attempt's primary reward was taken from, by the executor's rule (outcome.py): the
    benchmark's named key, else `reward`, else the only key; None when it is the mean of several."""
    if primary_key and primary_key in rewards:
        return primary_key
    if "reward" in rewards:
        return "reward"
    return next(iter(rewards)) if len(rewards) == 1 else None


def reward_rows(
    rewards: dict[str, Any] | None, primary_reward: float | None, primary_key: str | None
) -> dict[str, Any]:
    """Every reward key once with its value, the primary one marked (and first); `primary_is_mean` when
    the primary reward is the mean of all keys (no key is it)."""
    rewards = rewards or {}
    if not rewards:
        rows = [] if primary_reward is None else [{"key": "reward", "value": primary_reward, "primary": True}]
        return {"rows": rows, "primary_is_mean": False, "more": 0}
    chosen = primary_key_of(rewards, primary_key)
    # The primary key first, then by name: a JSON column (Postgres jsonb) does not keep the file's order.
    keys = sorted(rewards, key=lambda k: (k != chosen, k))[:MAX_REWARD_KEYS]
    rows = [{"key": clean(key, MAX_KEY), "value": rewards[key], "primary": key == chosen} for key in keys]
    more = max(len(rewards) - MAX_REWARD_KEYS, 0)
    return {"rows": rows, "primary_is_mean": chosen is None, "more": more}


def _find(artifacts: list[dict[str, Any]], path: str) -> dict[str, Any] | None:
    return next((a for a in artifacts if a.get("path") == path), None)


def report_artifact(artifacts: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The per-test report: `verifier/ctrf.json`, else the first XML file the verifier wrote."""
    ctrf = _find(artifacts, CTRF_PATH)
    if ctrf:
        return ctrf
    xml = sorted(
        (a for a in artifacts if a.get("path", "").startswith("verifier/") and a["path"].endswith(".xml")),
        key=lambda a: a["path"],
    )
    return xml[0] if xml else None


def output_view(data: bytes) -> dict[str, Any]:
    """The verifier's output as text: its last MAX_OUTPUT_SHOWN bytes when longer (the first line kept
    then is a whole one), decoded leniently, escape sequences dropped."""
    cut = len(data) > MAX_OUTPUT_SHOWN
    tail = data[-MAX_OUTPUT_SHOWN:] if cut else data
    if cut and b"\n" in tail:
        tail = tail[tail.index(b"\n") + 1 :]
    text = clean(tail.decode("utf-8", errors="replace"), MAX_OUTPUT_SHOWN, lines=True)
    return {"text": text, "truncated": cut, "shown_bytes": len(tail)}


async def read_artifact(fetch: Fetch, ref: dict[str, Any], limit: int) -> tuple[bytes | None, str | None]:
    size = int(ref.get("size") or 0)
    if size > limit:
        return None, f"{ref['path']} is {size:,} bytes, more than the {limit:,} shown here: download it"
    data = await fetch(str(ref.get("digest")))
    if data is None:
        return None, f"{ref['path']} is no longer stored"
    if len(data) != size:
        return None, f"{ref['path']} does not match its recorded size"
    return data, None


async def attempt_grading(fetch: Fetch, attempt: dict[str, Any], primary_key: str | None) -> dict[str, Any]:
    """What the attempt page and `GET …/attempts/{id}/grading` show of an attempt's grading."""
    result = attempt.get("result") or {}
    artifacts = [a for a in result.get("artifacts") or [] if isinstance(a, dict)]
    grading: dict[str, Any] = {
        "outcome": attempt.get("outcome"),
        "primary_reward": result.get("primary_reward"),
        "rewards": reward_rows(result.get("rewards"), result.get("primary_reward"), primary_key),
        "output": None,
        "report": None,
    }
    output = _find(artifacts, OUTPUT_PATH)
    if output:
        data, error = await read_artifact(fetch, output, MAX_OUTPUT_READ)
        view = output_view(data) if data is not None else {"text": "", "truncated": False, "shown_bytes": 0}
        grading["output"] = {"path": output["path"], "size": output.get("size"), "error": error, **view}
    report = report_artifact(artifacts)
    if report:
        data, error = await read_artifact(fetch, report, MAX_REPORT_BYTES)
        parsed: dict[str, Any] = {}
        if data is not None:
            try:
                parse = parse_ctrf if report["path"].endswith(".json") else parse_junit
                parsed = parse(data).as_dict()
            except ReportError as refused:
                error = f"{report['path']} could not be read: {refused}"
        grading["report"] = {"path": report["path"], "size": report.get("size"), "error": error, **parsed}
    return grading


def grading_source(
    store: EventStore, scope: Scope, key: str, attempt_id: str
) -> tuple[dict[str, Any], str | None]:
    """The attempt (in the caller's workspace, else 404) and its run's primary reward key."""
    attempt = attempt_detail(store, scope, key, attempt_id)
    run = benchmark_queries.find_run(store, scope, attempt["run_id"])
    return attempt, (run.get("submission") or {}).get("primary_reward_key")


FETCH_TRIES = 3


def object_fetcher(objects: Any) -> Fetch:
    """A Fetch over the NATS artifact bucket (app.state.artifacts)."""

    async def fetch(digest: str) -> bytes | None:
        # A read makes a consumer on the bucket's stream: under load that request can outlast nats-py's
        # 5 s answer time. It changes nothing, so it is tried again; still unanswered is a 503, never a 500.
        for _ in range(FETCH_TRIES):
            try:
                return (await objects.get(digest)).data or b""
            except NotFoundError:
                return None
            except nats.errors.TimeoutError:
                continue
        raise Unavailable("the object store did not answer in time; try again", code="STORE_UNAVAILABLE")

    return fetch
