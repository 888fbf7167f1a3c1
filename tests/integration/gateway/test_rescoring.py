"""Rescoring (issue 29): a run scored by an older deployment under scoring rules v1 is shown apart from
the current rows, never ranked with them; a platform administrator's rescore gives it final scores
under the current rules (v2: a sandbox fault after the agent phase is `failed`, once `errored`) and the
leaderboard ranks it again, every row of one version.

The old deployment's events are written as it wrote them: the executor's `errored` outcome, and final
scores with no rules version (nor schema version), computed by the real scoring code under rules v1.
"""

from __future__ import annotations

from typing import Any

import pytest
from regatta_scoring.scorer import Scorer
from regatta_scoring.scores import score_run, tally
from regatta_shared.events import (
    AttemptFinished,
    AttemptScheduled,
    RescoreRequested,
    RunExecutionCompleted,
    RunFinished,
    RunQueued,
    RunScored,
    RunStarted,
    Timings,
)
from regatta_shared.events.envelope import new_event
from regatta_shared.eventstore import StoredEvent
from regatta_shared.ids import attempt_id, leaderboard_stream, run_stream
from regatta_shared.rules.scoring_rules import RULES_VERSION, SANDBOX_FAULTS
from typer.testing import CliRunner

from regatta import cli as cli_main
from regatta import cli_admin
from regatta.client import ApiFailure, Client

from .conftest import ADMIN_TOKEN, Gateway

TASKS = [f"t{i}" for i in range(12)]


def agents(*names: tuple[str, str]) -> dict[str, Any]:
    """Harnesses that call a model: each (harness, model) is its own participant (a harness that calls
    none, as oracle, is one participant whatever model it names)."""
    return {
        "experiment_config": {"benchmark": "rescored"},
        "agents": [
            {
                "harness": harness,
                "model": {"type": "provider", "model": model, "api_key_secret": "KEY"},
                "env": {},
            }
            for harness, model in names
        ],
    }


def provider_key(gw: Gateway) -> None:
    """The key the agents' provider models name (never used: no attempt runs here)."""
    response = gw.cli("POST", "/environment-secrets", json={"name": "KEY", "value": "k", "scope": "user"})
    assert response.status_code in (200, 201), response.text


def finished(run_id: str, agent: int, task: str, outcome: str, **extra: Any) -> AttemptFinished:
    aid = attempt_id(run_id, agent, task, 0)
    reward = {"rewards": {"reward": float(outcome == "passed")}} if outcome != "errored" else {}
    return AttemptFinished(
        run_id=run_id,
        attempt_id=aid,
        agent_index=agent,
        task=task,
        attempt_index=0,
        try_number=1,
        outcome=outcome,  # type: ignore[arg-type]
        **reward,
        **extra,
    )


def record_old_deployment_run(gw: Gateway, run_id: str) -> None:
    """Agent 0 passes t0-t10 and on t11 outlasts the verifier after its agent phase (rules v1: errored);
    agent 1 passes t0-t5 and fails the rest. Then scores as the v1 scorer stored them, and `finished`."""
    events: list[Any] = [RunQueued(run_id=run_id, expected_attempts=24), RunStarted(run_id=run_id)]
    for agent in (0, 1):
        for task in TASKS:
            aid = attempt_id(run_id, agent, task, 0)
            events.append(
                AttemptScheduled(run_id=run_id, attempt_id=aid, agent_index=agent, task=task, attempt_index=0)
            )
            if agent == 0 and task == "t11":
                events.append(
                    finished(
                        run_id,
                        agent,
                        task,
                        "errored",
                        exception_type="VerifierTimeoutError",
                        exception_message="verifier timed out after 60 s",
                        timings=Timings(agent_execution=12.0, verifier=60.0, total=75.0),
                    )
                )
            else:
                passing = int(task[1:]) < (11 if agent == 0 else 6)
                events.append(finished(run_id, agent, task, "passed" if passing else "failed"))
    events.append(RunExecutionCompleted(run_id=run_id))
    stream = run_stream(run_id)
    gw.store.append(stream, [new_event(e, actor="run-scheduler") for e in events])

    history = gw.store.read_stream(stream)
    v1 = RunScored(
        run_id=run_id,
        final=True,
        agents=score_run(tally(history, rules_version=1)),  # type: ignore[arg-type]
        through_position=history[-1].position,
        rules_version=1,
    )
    old = new_event(v1, actor="scoring")
    old.data.pop("rules_version")
    old.metadata.pop("schema_version")
    gw.store.append(stream, [old, new_event(RunFinished(run_id=run_id), actor="scoring")])


def final_scores(gw: Gateway, run_id: str) -> list[StoredEvent]:
    return [
        e
        for e in gw.store.read_stream(run_stream(run_id))
        if e.type == RunScored.type_name and e.data["final"]
    ]


def board(gw: Gateway, benchmark_id: str) -> list[dict[str, Any]]:
    return gw.ok(gw.v1("GET", f"/benchmarks/{benchmark_id}/leaderboard"))["leaderboard"]


def by_participant(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {row["participant"]: row for row in rows}


def scoring_consumes_the_request(gw: Gateway, benchmark_id: str) -> None:
    """What scoring's durable consumer does with the command event the gateway appended."""
    stream = gw.store.read_stream(leaderboard_stream(benchmark_id))
    request = [e for e in stream if e.type == RescoreRequested.type_name][-1]
    Scorer(gw.store).on_event(request)
    gw.settle()


def assert_no_section_mixes_versions(rows: list[dict[str, Any]]) -> None:
    versions: dict[str, set[int]] = {}
    for row in rows:
        versions.setdefault(row["section"]["key"], set()).add(row["rules_version"])
        if row["rank"] is not None:
            assert row["rules_version"] == RULES_VERSION, row
    assert all(len(v) == 1 for v in versions.values()), versions


def test_a_rescore_ranks_old_runs_under_the_current_rules_and_never_mixes_versions(gateway: Gateway) -> None:
    gw = gateway
    assert "VerifierTimeoutError" in SANDBOX_FAULTS and RULES_VERSION == 2
    benchmark_id = gw.benchmark("rescored", TASKS)
    provider_key(gw)
    old_run = gw.submit(agents(("codex", "alpha"), ("claude-code", "beta")))["id"]
    record_old_deployment_run(gw, old_run)
    (v1_scores,) = final_scores(gw, old_run)
    assert v1_scores.data["rules_version"] == 1, "scores stored without a version are read as v1"
    v1_agent0 = v1_scores.data["agents"][0]
    assert (v1_agent0["errored"], v1_agent0["complete"], v1_agent0["pass_at_1"]["value"]) == (1, False, 1.0)

    # The current deployment finishes a run: the leaderboard is recomputed with the old run's scores.
    new_run = gw.submit(agents(("codex", "gamma"), ("claude-code", "delta")))["id"]
    gw.progress(new_run, passes=lambda agent, task: int(task[1:]) < (8 if agent == 0 else 1))
    before = board(gw, benchmark_id)
    rows = by_participant(before)
    assert set(rows) == {"codex|gamma", "claude-code|delta", "claude-code|beta"}, (
        "alpha is incomplete under v1: no row"
    )
    # 7 discordant tasks: p = 2/2^7, so the two are separated.
    assert [rows[p]["rank"] for p in ("codex|gamma", "claude-code|delta")] == [1, 2]
    old_row = rows["claude-code|beta"]
    assert old_row["rank"] is None and old_row["rules_version"] == 1
    assert old_row["section"]["unranked_reason"] == "scored under rules v1; rescore"
    assert old_row["section"]["key"] != rows["codex|gamma"]["section"]["key"]
    assert before[-1]["participant"] == "claude-code|beta", "unranked rows come last"
    assert_no_section_mixes_versions(before)

    # Only a platform administrator may rescore; a refusal records nothing.
    workspace_admin = gw.member("default", "lead@example.com", role="admin")
    count = gw.event_count()
    refused = gw.v1("POST", f"/benchmarks/{benchmark_id}/rescore", token=workspace_admin, workspace="default")
    assert refused.status_code == 403, refused.text
    bad = gw.v1("POST", f"/benchmarks/{benchmark_id}/rescore", json={"version": 2})
    assert bad.status_code == 400 and bad.json()["field"] == "version", bad.text
    assert gw.event_count() == count

    requested = gw.ok(gw.v1("POST", f"/benchmarks/{benchmark_id}/rescore", json={}), 202)
    assert requested["rules_version"] == RULES_VERSION and requested["benchmark_id"] == benchmark_id
    scoring_consumes_the_request(gw, benchmark_id)

    v1_again, v2_scores = final_scores(gw, old_run)
    assert v1_again.event_id == v1_scores.event_id, "the old scores are kept, never rewritten"
    assert v2_scores.data["rules_version"] == 2
    v2_agent0 = v2_scores.data["agents"][0]
    assert (v2_agent0["errored"], v2_agent0["failed"], v2_agent0["complete"]) == (0, 1, True)
    assert v2_agent0["pass_at_1"]["value"] == pytest.approx(11 / 12)
    assert len(final_scores(gw, new_run)) == 1, "a run already scored under the current rules is left alone"

    after = board(gw, benchmark_id)
    rows = by_participant(after)
    assert set(rows) == {"codex|alpha", "codex|gamma", "claude-code|beta", "claude-code|delta"}
    assert all(row["rank"] is not None and row["rules_version"] == 2 for row in after), after
    assert all(row["section"]["unranked_reason"] is None for row in after)
    assert len({row["section"]["key"] for row in after}) == 1, "one comparison group, one version"
    assert rows["codex|alpha"]["pass_at_1"]["value"] == pytest.approx(11 / 12)
    assert rows["codex|alpha"]["run_id"] == old_run
    # Re-ranked: alpha is now the top participant, whom no row of 3 or 5 discordant tasks is separated from
    # (p = 0.5 and 0.25 after Holm); delta, 10 tasks below, still is.
    assert rows["codex|alpha"]["comparison"]["top"] == "codex|alpha"
    assert {p: row["rank"] for p, row in rows.items()} == {
        "codex|alpha": 1,
        "codex|gamma": 1,
        "claude-code|beta": 1,
        "claude-code|delta": 2,
    }
    assert rows["claude-code|beta"]["pass_at_1"]["value"] == pytest.approx(0.5)
    assert_no_section_mixes_versions(after)

    # Rescoring again appends no scores: every run is current. The leaderboard is recomputed, equal.
    scored_before = gw.event_count()
    gw.ok(gw.v1("POST", f"/benchmarks/{benchmark_id}/rescore"), 202)
    scoring_consumes_the_request(gw, benchmark_id)
    assert len(final_scores(gw, old_run)) == 2 and len(final_scores(gw, new_run)) == 1
    assert gw.event_count() == scored_before + 2, "the request and one equal LeaderboardComputed"
    assert board(gw, benchmark_id) == after

    # A redelivered request appends nothing at all.
    scoring_consumes_the_request(gw, benchmark_id)
    assert gw.event_count() == scored_before + 2


def test_a_rescore_of_one_benchmark_version_leaves_runs_of_other_versions(gateway: Gateway) -> None:
    gw = gateway
    benchmark_id = gw.benchmark("rescored", TASKS)
    provider_key(gw)
    old_run = gw.submit(agents(("codex", "alpha"), ("claude-code", "beta")))["id"]
    record_old_deployment_run(gw, old_run)
    gw.ok(gw.v1("POST", f"/benchmarks/{benchmark_id}/rescore", json={"version": "0.9"}), 202)
    scoring_consumes_the_request(gw, benchmark_id)
    assert [e.data["rules_version"] for e in final_scores(gw, old_run)] == [1]
    gw.ok(gw.v1("POST", f"/benchmarks/{benchmark_id}/rescore", json={"version": "1.0"}), 202)
    scoring_consumes_the_request(gw, benchmark_id)
    assert [e.data["rules_version"] for e in final_scores(gw, old_run)] == [1, 2]


def test_the_admin_rescore_command_rescores_through_the_api(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`regatta admin rescore BENCHMARK`: the real command, its requests served in process by the real
    gateway app (the CLI's HTTP client given the app's transport); a workspace admin is refused."""
    gw = gateway
    benchmark_id = gw.benchmark("rescored", TASKS)
    provider_key(gw)
    old_run = gw.submit(agents(("codex", "alpha"), ("claude-code", "beta")))["id"]
    record_old_deployment_run(gw, old_run)
    workspace_admin = gw.member("default", "lead@example.com", role="admin")

    def cli(token: str, *args: str) -> Any:
        def client(url: str | None = None, token_: str | None = None) -> Client:
            made = Client("http://testserver", token)
            made.http = gw.client
            made.http.headers["Authorization"] = f"Bearer {token}"
            return made

        monkeypatch.setattr(cli_admin, "Client", client)
        try:
            return CliRunner().invoke(cli_main.app, ["admin", "rescore", *args])
        finally:
            gw.client.headers.pop("Authorization", None)

    refused = cli(workspace_admin, "rescored")
    assert isinstance(refused.exception, ApiFailure), refused.output
    assert "platform administrator" in str(refused.exception).lower(), refused.exception
    assert [e.data["rules_version"] for e in final_scores(gw, old_run)] == [1]

    done = cli(ADMIN_TOKEN, "rescored")
    assert done.exit_code == 0, (done.output, done.exception)
    assert " ".join(done.output.split()).startswith(
        f"Rescoring the runs of rescored under scoring rules v{RULES_VERSION} ("
    ), done.output
    scoring_consumes_the_request(gw, benchmark_id)
    assert [e.data["rules_version"] for e in final_scores(gw, old_run)] == [1, RULES_VERSION]
    assert by_participant(board(gw, benchmark_id))["codex|alpha"]["rank"] == 1
