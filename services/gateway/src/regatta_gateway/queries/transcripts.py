"""What an attempt's agent said and did, read from its artifacts for the side-by-side task view: its ATIF
trajectory (`…trajectory.json`, parsed here, drawn by the pages' one trajectory renderer), else its text
log under `agent/`, shown as the grading's verifier output is (tail, escapes dropped).

Both were written in the attempt's sandbox: the recorded size is checked before a byte is read, and a
trajectory that is not JSON, or nests past the parser's depth, is an error to show, not a crash.
"""

from __future__ import annotations

import json
from typing import Any

from regatta_gateway.queries.grading import MAX_OUTPUT_READ, Fetch, output_view, read_artifact

TRAJECTORY = "agent/trajectory.json"
MAX_TRAJECTORY_BYTES = 4 * 1024 * 1024
LOG_SUFFIXES = (".txt", ".log", ".out")


def _artifacts(attempt: dict[str, Any]) -> list[dict[str, Any]]:
    result = attempt.get("result") or {}
    return [
        a for a in result.get("artifacts") or [] if isinstance(a, dict) and isinstance(a.get("path"), str)
    ]


def transcript_artifact(artifacts: list[dict[str, Any]]) -> tuple[str, dict[str, Any]] | None:
    """("trajectory", ref) for the agent's trajectory, else ("text", ref) for its first text log."""
    exact = [a for a in artifacts if a["path"] == TRAJECTORY]
    trajectories = exact or sorted(
        (a for a in artifacts if a["path"].endswith("trajectory.json")), key=lambda a: a["path"]
    )
    if trajectories:
        return "trajectory", trajectories[0]
    logs = sorted(
        (a for a in artifacts if a["path"].startswith("agent/") and a["path"].endswith(LOG_SUFFIXES)),
        key=lambda a: a["path"],
    )
    return ("text", logs[0]) if logs else None


async def transcript(fetch: Fetch, attempt: dict[str, Any]) -> dict[str, Any] | None:
    found = transcript_artifact(_artifacts(attempt))
    if found is None:
        return None
    kind, ref = found
    body: dict[str, Any] = {"kind": kind, "path": ref["path"], "size": ref.get("size")}
    limit = MAX_TRAJECTORY_BYTES if kind == "trajectory" else MAX_OUTPUT_READ
    data, error = await read_artifact(fetch, ref, limit)
    if data is None:
        return {**body, "error": error}
    if kind == "text":
        return {**body, "error": None, **output_view(data)}
    try:
        return {**body, "error": None, "trajectory": json.loads(data)}
    except (ValueError, RecursionError):
        return {**body, "error": f"{ref['path']} is not valid JSON: download it from the artifacts"}
