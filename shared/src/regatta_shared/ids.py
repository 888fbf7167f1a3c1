"""Identifiers. Attempt ids are deterministic so every redelivery names the same attempt (invariant 4)."""

from __future__ import annotations

import hashlib
import secrets


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"


def attempt_id(run_id: str, agent_index: int, task: str, attempt_index: int) -> str:
    digest = hashlib.sha256(f"{run_id}|{agent_index}|{task}|{attempt_index}".encode()).hexdigest()
    return f"att_{digest[:20]}"


def run_stream(run_id: str) -> str:
    return f"run-{run_id}"


def benchmark_stream(benchmark_id: str) -> str:
    return f"benchmark-{benchmark_id}"


def workspace_stream(workspace_id: str) -> str:
    return f"workspace-{workspace_id}"


def leaderboard_stream(benchmark_id: str) -> str:
    return f"leaderboard-{benchmark_id}"
