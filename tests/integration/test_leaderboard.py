"""Scoring end to end on a real store: runs with known per-task outcomes finish and rank (issue 5)."""

from __future__ import annotations

from typing import Any

import pytest
from regatta_scoring.scorer import Scorer
from regatta_shared.events import (
    AgentSpec,
    AttemptFinished,
    AttemptScheduled,
    ExecutionSettings,
    ModelSpec,
    RunExecutionCompleted,
    RunSubmitted,
    RunTask,
    TaskSelection,
)
from regatta_shared.eventstore import EventStore, new_event
from regatta_shared.ids import attempt_id, leaderboard_stream, run_stream
from regatta_shared.rules.conditions import ScoringConditions, qualification

TASKS = [
    RunTask(name=f"t{i:02d}", digest=f"sha256:{i:064x}", category="math" if i < 4 else "text")
    for i in range(12)
]


def finish_run(
    store: EventStore,
    scorer: Scorer,
    run_id: str,
    agents: dict[str, set[int]],
    *,
    benchmark: str = "bm1",
    selection: TaskSelection | None = None,
    tasks: list[RunTask] | None = None,
    execution: ExecutionSettings | None = None,
    standard: ScoringConditions | None = None,
    recommended: str | None = None,
) -> None:
    """Record a run whose agent `model` passes exactly the listed task indices, then let scoring react."""
    tasks = tasks or TASKS
    specs = [
        AgentSpec(index=i, harness="codex", model=ModelSpec(type="provider", model=model))
        for i, model in enumerate(agents)
    ]
    submitted = RunSubmitted(
        run_id=run_id,
        workspace_id="ws",
        name=run_id,
        benchmark_id=benchmark,
        benchmark_name=benchmark,
        benchmark_version="1.0",
        benchmark_digest="sha256:dataset",
        selection=selection or TaskSelection(),
        tasks=tasks,
        agents=specs,
        execution=execution or ExecutionSettings(attempts_per_task=1, pass_threshold=1.0),
        standard_conditions=standard or ScoringConditions(pass_threshold=1.0),
        recommended_task_set=recommended,
    )
    events = [new_event(submitted)]
    for spec, passing in zip(specs, agents.values(), strict=True):
        for index, task in enumerate(tasks):
            passed = int(task.name[1:]) in passing
            aid = attempt_id(run_id, spec.index, task.name, 0)
            # As the scheduler writes it: an attempt is scheduled before it can finish.
            scheduled = AttemptScheduled(
                run_id=run_id, attempt_id=aid, agent_index=spec.index, task=task.name, attempt_index=0
            )
            events.append(new_event(scheduled))
            events.append(
                new_event(
                    AttemptFinished(
                        run_id=run_id,
                        attempt_id=aid,
                        agent_index=spec.index,
                        task=task.name,
                        attempt_index=0,
                        try_number=1,
                        outcome="passed" if passed else "failed",
                        rewards={"reward": float(passed)},
                        primary_reward=float(passed),
                    )
                )
            )
            del index
    events.append(new_event(RunExecutionCompleted(run_id=run_id)))
    for stored in store.append(run_stream(run_id), events):
        scorer.on_event(stored)
    for stored in store.read_stream(run_stream(run_id)):
        if stored.type == "RunFinished":
            scorer.on_event(stored)


def leaderboard(store: EventStore, benchmark: str = "bm1") -> dict[str, dict[str, Any]]:
    latest = store.read_stream(leaderboard_stream(benchmark))[-1]
    return {row["model"]: row for row in latest.data["rows"]}


def ranks(board: dict[str, dict[str, Any]], metric: str = "pass_at_1") -> dict[str, tuple[int, bool]]:
    return {
        model: (row["ranks"][metric]["rank"], row["ranks"][metric]["tied"]) for model, row in board.items()
    }


def test_three_agents_rank_with_honest_ties_and_reruns_replace_rows(store: EventStore) -> None:
    scorer = Scorer(store)
    finish_run(store, scorer, "run1", {"A": set(range(11)), "B": {0, 1}, "C": set(range(10))})
    board = leaderboard(store)
    # A vs B: p = 0.0039, C vs B: p = 0.0078 (Holm rejects both); A vs C: p = 1 → A and C share rank 1.
    assert ranks(board) == {"A": (1, True), "C": (1, True), "B": (3, False)}
    comparison = board["C"]["ranks"]["pass_at_1"]["comparison"]
    assert comparison["top"] == "codex|A" and comparison["p_value"] == 1.0
    assert board["A"]["pass_at_1"]["value"] == pytest.approx(11 / 12)
    assert board["B"]["run_id"] == "run1"

    finish_run(store, scorer, "run2", {"B": set(range(12))})
    board = leaderboard(store)
    assert len(board) == 3, "re-running an agent replaces its row"
    assert board["B"]["run_id"] == "run2" and board["B"]["pass_at_1"]["value"] == 1.0
    assert ranks(board)["B"] == (1, True)


def test_full_list_and_recommended_set_rank_in_one_ranking_never_tied_and_filtered_runs_never_rank(
    store: EventStore,
) -> None:
    """Issue 19 item 6: the set that ranks like a full run is the benchmark's recommended set, whatever its
    name. Issue 28: every row is in one ranking (statistics.md §6); each comparison group keeps its own
    latest run per agent, and rows of two groups are never tested against each other or tied."""
    scorer = Scorer(store)
    finish_run(store, scorer, "full", {"X": set(range(11)), "Y": set(range(3))}, benchmark="bm2")
    quick_tasks = TASKS[:6]
    finish_run(
        store,
        scorer,
        "quick",
        {"Y": set(range(6))},
        benchmark="bm2",
        selection=TaskSelection(task_set="quick"),
        tasks=quick_tasks,
        recommended="quick",
    )
    # A set named `parity` that the benchmark does not recommend is just a subset: it never ranks.
    finish_run(
        store,
        scorer,
        "parity",
        {"W": set(range(6))},
        benchmark="bm2",
        selection=TaskSelection(task_set="parity"),
        tasks=quick_tasks,
        recommended="quick",
    )
    finish_run(
        store,
        scorer,
        "filtered",
        {"Z": set(range(12))},
        benchmark="bm2",
        selection=TaskSelection(categories=["math"]),
        tasks=TASKS[:4],
    )
    rows = store.read_stream(leaderboard_stream("bm2"))[-1].data["rows"]
    # One ranking by pass@1: Y's quick run (6/6) above X's full run (11/12) above Y's full run (3/12); the
    # quick run of Y keeps Y's full-list row.
    assert [(r["model"], r["task_set"]) for r in rows] == [("Y", "quick"), ("X", "full"), ("Y", "full")]
    sections = [r["section"] for r in rows]
    assert sections[1] == sections[2] != sections[0]
    assert (sections[0]["recommended"], sections[1]["recommended"]) == (True, False)
    # X is below the top row only because the estimates differ: another group, never tested, never tied.
    # Y's full-list row is beaten by both: by X in its own group (exact paired test, p = 2/2^8, Holm
    # rejects) and by the quick row of another group.
    assert [(r["ranks"]["pass_at_1"]["rank"], r["ranks"]["pass_at_1"]["tied"]) for r in rows] == [
        (1, False),
        (2, False),
        (3, False),
    ]
    top, across, within = (r["ranks"]["pass_at_1"]["comparison"] for r in rows)
    assert (top["top"], top["top_row"]) == ("codex|Y", rows[0]["row_id"])
    assert across["comparable"] is False and across["p_value"] is None
    assert within["comparable"] is False, "compared with the top row, which is of another group"
    assert len({r["row_id"] for r in rows}) == 3
    reasons = {
        run: qualification(store.read_stream(run_stream(run))[0].data)["reasons"]
        for run in ("quick", "parity", "filtered")
    }
    assert reasons == {
        "quick": [],
        "parity": ["task set 'parity' is neither the full task list nor the recommended set 'quick'"],
        "filtered": ["a category- or task-name-filtered run never ranks"],
    }


def test_a_run_recorded_before_recommended_sets_keeps_the_parity_rule() -> None:
    """RunSubmitted payloads stored before they carried the recommended set: `parity` ranked then."""
    old = {"selection": {"task_set": "parity"}, "execution": {"attempts_per_task": 1}}
    assert qualification(old)["qualifies"] is True
    assert qualification({**old, "recommended_task_set": None})["qualifies"] is False


def test_run_scores_carry_intervals_categories_and_the_runs_own_ranking(store: EventStore) -> None:
    scorer = Scorer(store)
    finish_run(store, scorer, "run1", {"A": set(range(12)), "B": set()})
    final = next(
        e for e in store.read_stream(run_stream("run1")) if e.type == "RunScored" and e.data["final"]
    )
    agents = {a["agent_index"]: a for a in final.data["agents"]}
    z = 1.959963984540054
    # At ŷ = 1 the Wilson lower bound reduces to N / (N + z²).
    assert agents[0]["pass_at_1"] == {
        "value": 1.0,
        "ci_low": pytest.approx(12 / (12 + z * z), abs=1e-12),
        "ci_high": 1.0,
        "n": 12,
    }
    assert agents[1]["pass_at_1"]["value"] == 0.0 and agents[1]["pass_at_1"]["ci_low"] == 0.0
    assert (agents[0]["rank"], agents[1]["rank"]) == (1, 2)
    assert {c["category"]: c["n_tasks"] for c in agents[0]["categories"]} == {"math": 4, "text": 8}
    assert agents[0]["passed"] == 12 and agents[1]["failed"] == 12 and agents[0]["complete"]
    assert [e.type for e in store.read_stream(run_stream("run1"))][-2:] == ["RunScored", "RunFinished"]


def test_runs_of_one_agent_at_thresholds_1_and_0_never_share_a_ranking_group(store: EventStore) -> None:
    """Issue 21: a run at a lenient threshold (or more time, or retries) never ranks against honest runs,
    even as the agent's latest run, and each row says which conditions it was scored under."""
    scorer = Scorer(store)
    finish_run(store, scorer, "honest", {"A": set(range(6)), "B": set(range(12))}, benchmark="bm3")
    lenient = ExecutionSettings(attempts_per_task=1, pass_threshold=0.0)
    finish_run(store, scorer, "lenient", {"A": set(range(12))}, benchmark="bm3", execution=lenient)
    for name, execution in (
        ("slow", ExecutionSettings(attempts_per_task=1, pass_threshold=1.0, timeout_multiplier=2.0)),
        ("retried", ExecutionSettings(attempts_per_task=1, pass_threshold=1.0, max_retries=1)),
    ):
        finish_run(store, scorer, name, {"C": set(range(12))}, benchmark="bm3", execution=execution)
    board = leaderboard(store, "bm3")
    assert set(board) == {"A", "B"}, "runs under non-standard conditions never rank"
    assert board["A"]["run_id"] == "honest", "a later lenient run does not replace the honest row"
    assert board["A"]["pass_at_1"]["value"] == 0.5
    assert board["A"]["conditions"] == {
        "pass_threshold": 1.0,
        "primary_reward_key": None,
        "timeout_multiplier": 1.0,
        "max_retries": 0,
        "verifier_integrity": "record",
    }
    assert ranks(board) == {"B": (1, False), "A": (2, False)}
    # What the gateway shows for each run: the same rule, with the reason in words.
    reasons = {
        run: qualification(store.read_stream(run_stream(run))[0].data)["reasons"]
        for run in ("honest", "lenient", "slow", "retried")
    }
    assert reasons == {
        "honest": [],
        "lenient": ["pass threshold 0 differs from the benchmark's 1"],
        "slow": ["timeout multiplier 2 differs from the benchmark's 1"],
        "retried": ["retries 1 differs from the benchmark's 0"],
    }


def test_runs_under_different_standard_conditions_are_ranked_apart(store: EventStore) -> None:
    """A re-synced manifest may change the benchmark's threshold while its digest stays: runs at the old and
    the new standard both qualify, but are different measurements, so they are never tested or tied."""
    scorer = Scorer(store)
    finish_run(store, scorer, "before", {"X": set(range(11))}, benchmark="bm4")
    half = ScoringConditions(pass_threshold=0.5)
    after = ExecutionSettings(attempts_per_task=1, pass_threshold=0.5)
    finish_run(store, scorer, "after", {"Y": set(range(10))}, benchmark="bm4", execution=after, standard=half)
    board = leaderboard(store, "bm4")
    # Two groups in one ranking: Y is below X by its estimate alone, never tested or tied against X.
    assert ranks(board) == {"X": (1, False), "Y": (2, False)}
    assert board["X"]["section"]["key"] != board["Y"]["section"]["key"]
    comparison = board["Y"]["ranks"]["pass_at_1"]["comparison"]
    assert (comparison["top"], comparison["comparable"], comparison["p_value"]) == ("codex|X", False, None)
    assert board["Y"]["conditions"]["pass_threshold"] == 0.5


def test_a_recommended_set_row_and_a_full_row_with_equal_estimates_are_not_tied(store: EventStore) -> None:
    """Issue 28: one ranking, but a tie is a test's verdict inside one group. Equal estimates of two
    groups share a rank number (neither beats the other) and neither row is marked tied."""
    scorer = Scorer(store)
    finish_run(store, scorer, "full", {"A": set(range(6))}, benchmark="bm5", recommended="quick")
    finish_run(
        store,
        scorer,
        "quick",
        {"B": set(range(3))},
        benchmark="bm5",
        selection=TaskSelection(task_set="quick"),
        tasks=TASKS[:6],
        recommended="quick",
    )
    rows = store.read_stream(leaderboard_stream("bm5"))[-1].data["rows"]
    assert [(r["model"], r["pass_at_1"]["value"]) for r in rows] == [("A", 0.5), ("B", 0.5)]
    assert [(r["ranks"]["pass_at_1"]["rank"], r["ranks"]["pass_at_1"]["tied"]) for r in rows] == [
        (1, False),
        (1, False),
    ]
    assert rows[1]["ranks"]["pass_at_1"]["comparison"]["comparable"] is False


def test_a_run_under_another_verifier_integrity_policy_never_ranks_with_runs_under_the_standard(
    store: EventStore,
) -> None:
    """Issue 36: `enforce` fails attempts `record` would score as the verifier did, so a run under a policy
    other than its benchmark's never ranks; and runs at two standards (the manifest changed it) are two
    groups, never tested against or tied with each other."""
    scorer = Scorer(store)
    finish_run(store, scorer, "recorded", {"A": set(range(6))}, benchmark="bm6")
    enforce = ExecutionSettings(attempts_per_task=1, pass_threshold=1.0, verifier_integrity="enforce")
    finish_run(
        store, scorer, "strict", {"A": set(range(12)), "B": set(range(6))}, benchmark="bm6", execution=enforce
    )
    board = leaderboard(store, "bm6")
    assert set(board) == {"A"} and board["A"]["run_id"] == "recorded"
    assert qualification(store.read_stream(run_stream("strict"))[0].data)["reasons"] == [
        "verifier integrity enforce differs from the benchmark's record"
    ]

    # The benchmark's standard becomes `enforce`: a run under it qualifies, in a group of its own.
    enforced = ScoringConditions(pass_threshold=1.0, verifier_integrity="enforce")
    finish_run(
        store, scorer, "enforced", {"B": set(range(6))}, benchmark="bm6", execution=enforce, standard=enforced
    )
    board = leaderboard(store, "bm6")
    assert {model: row["run_id"] for model, row in board.items()} == {"A": "recorded", "B": "enforced"}
    assert board["A"]["section"]["key"] != board["B"]["section"]["key"]
    assert board["B"]["conditions"]["verifier_integrity"] == "enforce"
    # Equal estimates, yet no test compares the two rows: they share the rank number, neither is tied.
    assert ranks(board) == {"A": (1, False), "B": (1, False)}
    comparison = board["B"]["ranks"]["pass_at_1"]["comparison"]
    assert comparison["comparable"] is False and comparison["p_value"] is None
