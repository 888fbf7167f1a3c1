"""CSV builders of run downloads (regatta_gateway.queries.exports): pure functions of read-model shapes."""

from __future__ import annotations

import csv
import io

from regatta_gateway.queries.exports import (
    RESULTS_COLUMNS,
    SUMMARY_COLUMNS,
    logs_txt,
    results_csv,
    summary_csv,
)

SUBMISSION = {
    "agents": [
        {
            "index": 0,
            "harness": "terminus-2",
            "model": {"type": "hosted", "base_model": "b", "lora_model_name": "l"},
        },
        {"index": 1, "harness": "codex", "model": {"type": "provider", "model": "openai/gpt-5.2"}},
    ],
    "tasks": [{"name": "t1", "category": "math"}, {"name": "t2", "category": None}],
    "execution": {"attempts_per_task": 2},
}


def rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_summary_has_one_row_per_agent_even_before_scores() -> None:
    parsed = rows(summary_csv(SUBMISSION, []))
    assert list(parsed[0]) == SUMMARY_COLUMNS
    assert [(r["agent"], r["harness"], r["model"], r["pass_at_1"], r["passed"]) for r in parsed] == [
        ("1", "terminus-2", "b:l", "", "0"),
        ("2", "codex", "openai/gpt-5.2", "", "0"),
    ]


def test_summary_carries_intervals_pass_at_k_counts_tokens_cost_and_time() -> None:
    score = {
        "agent_index": 1,
        "pass_at_1": {"value": 0.5, "ci_low": 0.1, "ci_high": 0.9, "n": 2},
        "pass_at_k": [
            {"k": 1, "value": 0.5, "ci_low": 0.1, "ci_high": 0.9},
            {"k": 2, "value": 1.0, "ci_low": 0.3, "ci_high": 1.0},
        ],
        "passed": 2,
        "failed": 1,
        "errored": 1,
        "cancelled": 0,
        "input_tokens": 1000,
        "output_tokens": 200,
        "tokens_per_task": 600.0,
        "cost_usd": 0.4,
        "cost_per_task": 0.2,
        "mean_duration_seconds": 12.5,
        "rank": 1,
        "tied": True,
    }
    second = rows(summary_csv(SUBMISSION, [score], final=True))[1]
    assert second["pass_at_1"] == "0.5" and (second["pass_at_1_ci_low"], second["pass_at_1_ci_high"]) == (
        "0.1",
        "0.9",
    )
    assert (second["k"], second["pass_at_k"], second["pass_at_k_ci_low"]) == ("2", "1.0", "0.3")
    assert (second["passed"], second["failed"], second["errored"], second["cancelled"]) == (
        "2",
        "1",
        "1",
        "0",
    )
    # Per task means per attempt (regatta_shared.rules.per_task): 4 finished attempts, whatever the stored
    # per-task figures of an older score said.
    assert (second["cost_usd"], second["cost_per_task_usd"], second["time_per_task_seconds"]) == (
        "0.4",
        "0.1",
        "12.5",
    )
    assert second["tokens_per_task"] == "300.0"
    assert (second["rank"], second["tied"], second["final"]) == ("1", "true", "true")


def test_results_has_one_row_per_attempt_numbered_from_one() -> None:
    attempts = [
        {
            "attempt_id": "a1",
            "agent_index": 0,
            "task": "t1",
            "attempt_index": 1,
            "status": "finished",
            "outcome": "passed",
            "try_number": 2,
            "result": {
                "primary_reward": 1.0,
                "rewards": {"reward": 1.0},
                "usage": {"input_tokens": 5, "cost_usd": 0.01},
                "timings": {"total": 3.5},
                "artifacts": [{"path": "x", "digest": "d", "size": 1}],
                "exception_message": 'line one, "quoted"\nline two',
            },
        },
        {
            "attempt_id": "a2",
            "agent_index": 1,
            "task": "t2",
            "attempt_index": 0,
            "status": "running",
            "outcome": None,
            "try_number": 1,
            "result": None,
        },
    ]
    parsed = rows(results_csv(SUBMISSION, attempts))
    assert list(parsed[0]) == RESULTS_COLUMNS
    first, second = parsed
    assert (first["task"], first["category"], first["agent"], first["attempt"], first["outcome"]) == (
        "t1",
        "math",
        "1",
        "2",
        "passed",
    )
    assert (first["rewards"], first["duration_seconds"], first["artifact_count"]) == (
        '{"reward":1.0}',
        "3.5",
        "1",
    )
    assert first["exception_message"] == 'line one, "quoted"\nline two'
    assert (second["status"], second["outcome"], second["harness"], second["artifact_count"]) == (
        "running",
        "",
        "codex",
        "0",
    )


def test_logs_are_one_line_per_entry() -> None:
    text = logs_txt(
        [{"timestamp": "2026-01-01T00:00:00Z", "level": "info", "step": "submit", "message": "Run submitted"}]
    )
    assert text == "2026-01-01T00:00:00Z INFO    [submit] Run submitted\n"
