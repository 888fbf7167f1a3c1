"""`regatta run label / unlabel / attempts` (issue 30, Annotate), the real CLI in a subprocess against the
gateway served on a socket: a label put on from the CLI is the API's, listed in the attempts table with its
note, filtered, and taken off by its name in any case; bad input names the field and records nothing; a
member of another workspace cannot label."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from .cli_support import regatta, served
from .conftest import Gateway
from .test_attempt_labels import attempts, finished_run


@pytest.fixture
def url(gateway: Gateway) -> Iterator[str]:
    with served(gateway) as address:
        yield address


def row_of(table: str, attempt_id: str) -> str:
    rows = [line for line in table.splitlines() if attempt_id in line]
    assert len(rows) == 1, table
    return rows[0]


def test_the_cli_labels_lists_filters_and_unlabels_attempts(gateway: Gateway, url: str) -> None:
    gw = gateway
    run = finished_run(gw)
    first, second, *_ = attempts(gw, run["id"])

    made = regatta(
        url, "run", "label", run["name"], first["attempt_id"], "Flaky  Task", "--note", "retry passes"
    )
    assert made.returncode == 0, made.stdout + made.stderr
    assert f"Labelled {first['attempt_id']}: flaky task (lbl_" in made.stdout
    stored = {a["attempt_id"]: a["labels"] for a in attempts(gw, run["id"])}
    assert [(x["label"], x["note"]) for x in stored[first["attempt_id"]]] == [("flaky task", "retry passes")]
    assert stored[second["attempt_id"]] == []
    as_json = regatta(url, "run", "label", run["id"], second["attempt_id"], "infra", "--json")
    assert as_json.returncode == 0, as_json.stdout + as_json.stderr
    assert json.loads(as_json.stdout)["label"] == "infra"

    table = regatta(url, "run", "attempts", run["id"])
    assert table.returncode == 0, table.stdout + table.stderr
    assert "Labels" in table.stdout
    assert "flaky task: retry passes" in row_of(table.stdout, first["attempt_id"])
    assert "infra" in row_of(table.stdout, second["attempt_id"])
    listed = json.loads(
        regatta(url, "run", "attempts", run["name"], "--label", "flaky task", "--json").stdout
    )
    assert [a["attempt_id"] for a in listed["attempts"]] == [first["attempt_id"]]

    # Bad input: the field is named, nothing is recorded.
    before = gw.event_count()
    for bad in (["<script>"], ["x" * 41], ["ok", "--note", "bell\x07"]):
        refused = regatta(url, "run", "label", run["id"], first["attempt_id"], *bad)
        assert refused.returncode == 1, (bad, refused.stdout)
        assert ("note" if "--note" in bad else "label") in refused.stdout, (bad, refused.stdout)
    missing = regatta(url, "run", "label", run["id"], "att_0000000000000000dead", "infra")
    assert missing.returncode == 1 and "is not an attempt of run" in missing.stdout, missing.stdout
    assert gw.event_count() == before

    # Another workspace's member sees no such run.
    gw.workspace("beta")
    bob = gw.member("beta", "bob@b.example", role="admin")
    before = gw.event_count()
    foreign = regatta(url, "run", "label", run["id"], first["attempt_id"], "infra", token=bob)
    assert foreign.returncode == 1 and "not found" in foreign.stdout.lower(), foreign.stdout
    assert regatta(url, "run", "attempts", run["id"], token=bob).returncode == 1
    assert gw.event_count() == before

    removed = regatta(url, "run", "unlabel", run["id"], first["attempt_id"], "FLAKY task")
    assert removed.returncode == 0, removed.stdout + removed.stderr
    assert "Removed flaky task" in removed.stdout
    stored = {a["attempt_id"]: a["labels"] for a in attempts(gw, run["id"])}
    assert stored[first["attempt_id"]] == [] and [x["label"] for x in stored[second["attempt_id"]]] == [
        "infra"
    ]
    again = regatta(url, "run", "unlabel", run["id"], first["attempt_id"], "flaky task")
    assert again.returncode == 1 and "has no label" in again.stdout, again.stdout
    by_id = regatta(
        url, "run", "unlabel", run["id"], second["attempt_id"], stored[second["attempt_id"]][0]["id"]
    )
    assert by_id.returncode == 0, by_id.stdout
    assert all(a["labels"] == [] for a in attempts(gw, run["id"]))
