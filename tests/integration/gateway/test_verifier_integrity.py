"""Issue 36 through the gateway's service layer, on SQLite and Postgres: the verifier-integrity policy as a
run setting and a scoring condition, and the evidence of finished attempts (AttemptFinished.integrity)
folded once and counted alike by the attempts filter, the per-agent counts, the leaderboard's rows and
results.csv."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest
from regatta_gateway.commands import runs as run_commands
from regatta_gateway.errors import Invalid
from regatta_gateway.queries import run_activity
from regatta_gateway.queries.exports import results_csv
from regatta_gateway.queries.leaderboards import leaderboard_rows
from regatta_gateway.queries.run_detail import run_detail
from regatta_gateway.queries.run_snapshot import load_snapshot
from regatta_shared.events import BenchmarkMetadata
from regatta_shared.events.integrity import (
    AgentProcess,
    AttemptIntegrity,
    Explanation,
    FileFacts,
    ToolChainChange,
)
from regatta_shared.ids import run_stream

from .conftest import demo_config
from .service_support import Services, refused

SWAPPED_LS = ToolChainChange(
    path="/usr/bin/ls",
    change="changed",
    before=FileFacts(kind="file", size=138208, sha256="a" * 64, mode=0o755),
    after=FileFacts(kind="file", size=64, sha256="b" * 64, mode=0o755),
)
INSTALLED_JQ = ToolChainChange(
    path="/usr/bin/jq",
    change="added",
    after=FileFacts(kind="file", size=31000, sha256="c" * 64, mode=0o755),
    explained_by=Explanation(source="dpkg", package="jq"),
)
REMOVED_WGET = ToolChainChange(path="/usr/bin/wget", change="deleted", before=FileFacts(kind="file"))
# What each of a two-task, two-agent run's attempts left for its verifier: (agent, task) -> evidence.
EVIDENCE: dict[tuple[int, str], AttemptIntegrity | None] = {
    (0, "t1"): AttemptIntegrity(
        changes=[SWAPPED_LS, INSTALLED_JQ, REMOVED_WGET], changes_total=3, unexplained=1
    ),
    (0, "t2"): AttemptIntegrity(verifier_files_written=["/tests/test_outputs.py"]),
    (1, "t1"): AttemptIntegrity(checked=False, note="the tool-chain listing failed"),
    (1, "t2"): AttemptIntegrity(
        processes=[AgentProcess(pid=42, name="python3", command="python3 -m http.server")], processes_total=1
    ),
}


@pytest.fixture
def services(services: Services) -> Services:
    services.benchmark("demo", ["t1", "t2"])
    services.benchmark("strict", ["t1", "t2"], metadata=BenchmarkMetadata(verifier_integrity="enforce"))
    return services


def submitted(sv: Services, run_id: str) -> dict[str, Any]:
    return sv.store.read_stream(run_stream(run_id))[0].data


def test_a_run_keeps_its_benchmarks_policy_unless_it_names_one_and_only_the_standard_ranks(
    services: Services,
) -> None:
    sv = services
    recorded = sv.submit(demo_config())["id"]
    enforced_here = sv.submit(demo_config(execution_config={"verifier_integrity": "enforce"}))["id"]
    strict_default = sv.submit(demo_config("strict"))["id"]
    strict_record = sv.submit(demo_config("strict", execution_config={"verifier_integrity": "record"}))["id"]

    policies = {
        run: (
            submitted(sv, run)["execution"]["verifier_integrity"],
            submitted(sv, run)["standard_conditions"],
        )
        for run in (recorded, enforced_here, strict_default, strict_record)
    }
    assert {
        run: (policy, standard["verifier_integrity"]) for run, (policy, standard) in policies.items()
    } == {
        recorded: ("record", "record"),
        enforced_here: ("enforce", "record"),
        strict_default: ("enforce", "enforce"),
        strict_record: ("record", "enforce"),
    }
    assert 'verifier_integrity = "enforce"' in submitted(sv, enforced_here)["config_toml"]

    def qualification(run: str) -> dict[str, Any]:
        return run_detail(sv.store, sv.scope(), run)["leaderboard_qualification"]

    assert qualification(recorded)["qualifies"] and qualification(strict_default)["qualifies"]
    assert qualification(enforced_here)["reasons"] == [
        "verifier integrity enforce differs from the benchmark's record"
    ]
    assert qualification(enforced_here)["differences"] == [
        {"field": "verifier_integrity", "label": "verifier integrity", "run": "enforce", "standard": "record"}
    ]
    assert qualification(strict_record)["reasons"] == [
        "verifier integrity record differs from the benchmark's enforce"
    ]


@pytest.mark.parametrize("policy", ["strict", "", "Record", 1, None])
def test_an_unknown_policy_is_refused_naming_the_field_and_the_allowed_values(
    services: Services, policy: Any
) -> None:
    sv = services
    before = sv.event_count()
    config = demo_config(execution_config={"verifier_integrity": policy})
    if policy is None:  # null is "not named": the benchmark's policy
        assert submitted(sv, sv.submit(config)["id"])["execution"]["verifier_integrity"] == "record"
        return
    error = refused(lambda: sv.submit(config), Invalid, "VALIDATION")
    assert error.field == "execution_config.verifier_integrity"
    assert error.issues[0]["message"].startswith(
        'execution.verifier_integrity must be "record" or "enforce" (got '
    ), error.issues
    assert sv.event_count() == before


def test_a_toml_submission_names_the_line_of_a_bad_policy() -> None:
    toml = (
        '[experiment]\nbenchmark = "demo"\n[[agents]]\nharness = "oracle"\n[agents.model]\ntype = "hosted"\n'
        'base_model = "b"\n[execution]\nverifier_integrity = "paranoid"\n'
    )
    with pytest.raises(Invalid) as raised:
        run_commands.parse_submission(toml.encode(), "application/toml")
    issue = raised.value.issues[0]
    assert (raised.value.field, issue["line"]) == ("[execution] verifier_integrity", 9)
    assert '"record" or "enforce" (got \'paranoid\')' in issue["message"]


def test_the_evidence_is_folded_once_and_every_count_counts_the_attempts_its_filter_lists(
    services: Services,
) -> None:
    sv = services
    run_id = sv.submit(demo_config())["id"]
    sv.progress(run_id, integrity=lambda agent, task, _index: EVIDENCE[(agent, task)])
    scope = sv.scope()

    def listed(**filters: Any) -> set[tuple[int, str]]:
        rows = run_activity.list_attempts(sv.store, scope, run_id, **filters)
        return {(row["agent_index"], row["task"]) for row in rows}

    assert listed(integrity="unexplained") == {(0, "t1")}
    assert listed(integrity="verifier_writes") == {(0, "t2")}
    assert listed(integrity="processes") == {(1, "t2")}
    assert listed(integrity="not_checked") == {(1, "t1")}
    assert listed(integrity="unexplained", agent_index=1) == set()
    error = refused(lambda: listed(integrity="suspicious"), Invalid, "VALIDATION")
    assert error.field == "integrity" and "unexplained" in error.message

    # Per agent (GET /runs/{key}, the run page's Agent Results): the attempts each filter lists.
    agents = {a["agent_index"]: a["integrity"] for a in run_detail(sv.store, scope, run_id)["agents"]}
    assert agents == {
        0: {"checked": 2, "not_checked": 0, "unexplained": 1, "verifier_writes": 1, "processes_alive": 0},
        1: {"checked": 1, "not_checked": 1, "unexplained": 0, "verifier_writes": 0, "processes_alive": 1},
    }
    for agent, counts in agents.items():
        for word, key in (("unexplained", "unexplained"), ("verifier_writes", "verifier_writes")):
            assert counts[key] == len(listed(integrity=word, agent_index=agent))

    # Each leaderboard row: its own run's attempts for its agent.
    benchmark_id = sv.raw_rows("rm_runs")[0]["benchmark_id"]
    rows = {row["agent_index"]: row for row in leaderboard_rows(sv.store, benchmark_id)}
    assert rows[0]["run_id"] == run_id and rows[0]["integrity"] == agents[0]
    assert rows[1]["integrity"] == agents[1]

    # One attempt: the evidence as recorded, and its counts.
    aid = next(r["attempt_id"] for r in run_activity.list_attempts(sv.store, scope, run_id, task="t1"))
    attempt = run_activity.attempt_detail(sv.store, scope, run_id, aid)
    assert attempt["result"]["integrity"] == json.loads(EVIDENCE[(0, "t1")].model_dump_json())  # type: ignore[union-attr]
    assert attempt["integrity"] == {
        "checked": True,
        "unexplained": 1,
        "processes_alive": 0,
        "verifier_files_written": 0,
    }
    assert attempt["labels"] == []

    # results.csv, rebuilt from the run's events: the same counts, numbers only.
    snapshot = load_snapshot(sv.store, run_id, sv.store.read_stream(run_stream(run_id))[-1].version)
    cells = {
        (int(row["agent"]) - 1, row["task"]): (
            row["integrity"],
            row["integrity_unexplained"],
            row["integrity_processes_alive"],
            row["integrity_verifier_writes"],
        )
        for row in csv.DictReader(io.StringIO(results_csv(snapshot.submission, snapshot.attempt_rows())))
    }
    assert cells == {
        (0, "t1"): ("checked", "1", "0", "0"),
        (0, "t2"): ("checked", "0", "0", "1"),
        (1, "t1"): ("not checked", "", "", ""),
        (1, "t2"): ("checked", "0", "1", "0"),
    }


def test_attempts_of_an_environment_that_does_not_look_have_no_evidence_and_count_nothing(
    services: Services,
) -> None:
    sv = services
    run_id = sv.submit(demo_config())["id"]
    sv.progress(run_id)
    scope = sv.scope()
    attempts = run_activity.list_attempts(sv.store, scope, run_id)
    assert [a["integrity"] for a in attempts] == [None] * 4
    assert all(a["result"]["integrity"] is None for a in attempts)
    assert run_activity.list_attempts(sv.store, scope, run_id, integrity="not_checked") == []
    counts = [a["integrity"] for a in run_detail(sv.store, scope, run_id)["agents"]]
    assert counts == [dict.fromkeys(counts[0], 0)] * 2
