"""Reports speak for an attempt only with its key (issue 18, finding 2): the scheduler's side
(regatta_run_scheduler.reports) with the executor's side (open_key, sign) as they run."""

from __future__ import annotations

import pytest
from regatta_run_scheduler.reports import authentic_claim, authentic_reports
from regatta_shared.messaging.jobs import AttemptReport
from regatta_shared.security.attempt_auth import MAC_HEADER, AttemptKeys, open_key, sign
from regatta_shared.security.sealing import SEALED_SECRETS, SealError, derive_key

MASTER = b"a-master-key-of-this-deployment"
SEALING = derive_key(MASTER, SEALED_SECRETS)


def report(attempt_id: str = "att_1", run_id: str = "run_1", outcome: str = "failed") -> bytes:
    return (
        AttemptReport(
            kind="finished",
            run_id=run_id,
            attempt_id=attempt_id,
            try_number=1,
            executor_id="e",
            outcome=outcome,
        )
        .model_dump_json()
        .encode()
    )


def executor_signs(
    keys: AttemptKeys, payload: bytes, run_id: str = "run_1", attempt_id: str = "att_1"
) -> str:
    """What the executor does with its job: open the sealed key with the sealing key, sign."""
    return sign(open_key(keys.sealed_key(run_id, attempt_id), SEALING, run_id, attempt_id), payload)


def test_only_the_reports_signed_with_their_attempts_key_are_believed() -> None:
    keys = AttemptKeys(MASTER)
    genuine = report()
    forged_outcome = report(outcome="passed")
    other_attempt = report(attempt_id="att_2", outcome="passed")
    messages = [
        (genuine, {MAC_HEADER: executor_signs(keys, genuine)}),
        (forged_outcome, {MAC_HEADER: executor_signs(keys, genuine)}),  # a genuine MAC on other bytes
        (other_attempt, {MAC_HEADER: sign(keys.key("run_1", "att_1"), other_attempt)}),  # another key
        (forged_outcome, None),
        (forged_outcome, {MAC_HEADER: "00" * 32}),
        (b"not json", {MAC_HEADER: "00"}),
    ]
    accepted = authentic_reports(keys, messages)
    assert [(r.attempt_id, r.outcome) for r in accepted] == [("att_1", "failed")]


def test_another_deployments_key_neither_signs_nor_opens() -> None:
    ours, theirs = AttemptKeys(MASTER), AttemptKeys(b"another-deployment-master-key")
    payload = report(outcome="passed")
    assert not authentic_reports(ours, [(payload, {MAC_HEADER: sign(theirs.key("run_1", "att_1"), payload)})])
    with pytest.raises(SealError):
        open_key(theirs.sealed_key("run_1", "att_1"), SEALING, "run_1", "att_1")
    with pytest.raises(SealError):  # a job's sealed key copied onto another attempt opens nothing
        open_key(ours.sealed_key("run_1", "att_1"), SEALING, "run_1", "att_2")


def test_claims_need_the_attempts_mac() -> None:
    keys = AttemptKeys(MASTER)
    claim = b"att_1"
    assert authentic_claim(keys, "run_1", claim, {MAC_HEADER: executor_signs(keys, claim)}) == "att_1"
    assert authentic_claim(keys, "run_2", claim, {MAC_HEADER: executor_signs(keys, claim)}) is None
    assert authentic_claim(keys, "run_1", claim, None) is None
