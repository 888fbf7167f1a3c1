"""Run-supplied secrets are crypto-shredded when the run ends (invariant 6, issue 8 item 4).

The gateway seals a run's secrets with a fresh per-run key kept only in `run_keys`; the scheduler hands
it to executors inside each job and deletes the row when the run ends (execution completed, stopped,
failed or finished). Afterwards the blob in the event log opens with nothing, the master key included.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from regatta_gateway.secrets.keys import DOWNLOAD_URLS, SECRETS_AT_REST
from regatta_run_scheduler import run as aggregate
from regatta_run_scheduler.scheduler import RunScheduler, build_job
from regatta_scoring.scorer import Scorer
from regatta_shared.events import RunSubmitted
from regatta_shared.eventstore import StoredEvent
from regatta_shared.ids import run_stream
from regatta_shared.messaging.jobs import AttemptReport
from regatta_shared.security import run_keys
from regatta_shared.security.sealing import (
    SEALED_SECRETS,
    SealError,
    decrypt,
    derive_key,
    load_master_key,
    open_job_secrets,
    sealing_key,
    unseal,
)

from .conftest import Gateway, demo_config
from .test_secret_store import set_secret


@pytest.fixture
def gateway(gateway_on_both: Gateway) -> Gateway:
    """Shredding on both backends: the keys are deleted from each store's own tables."""
    return gateway_on_both


WORKSPACE_VALUE = "ws-value-purge-71c0d2"
PROVIDED_VALUE = "provided-value-purge-9ae413"
EXPECTED = {"OPENAI_API_KEY": WORKSPACE_VALUE, "RUN_ONLY": PROVIDED_VALUE}


def submit_with_secrets(gw: Gateway) -> str:
    if not gw.raw_rows("secret_values"):
        gw.benchmark("demo", ["t1", "t2"])
        set_secret(gw, "OPENAI_API_KEY", WORKSPACE_VALUE, "workspace")
    config = demo_config(secrets={"required": ["RUN_ONLY"], "provided": {"RUN_ONLY": PROVIDED_VALUE}})
    config["agents"][0]["model"] = {
        "type": "provider",
        "model": "openai/gpt-4o",
        "api_key_secret": "OPENAI_API_KEY",
    }
    return gw.submit(config)["id"]


def events_of(gw: Gateway, run_id: str, kind: str) -> list[StoredEvent]:
    return [e for e in gw.store.read_stream(run_stream(run_id)) if e.type == kind]


def submission(gw: Gateway, run_id: str) -> RunSubmitted:
    payload = events_of(gw, run_id, "RunSubmitted")[0].payload()
    assert isinstance(payload, RunSubmitted)
    return payload


def assert_shredded(gw: Gateway, scheduler: RunScheduler, run_id: str) -> None:
    """No key row; the stored blob opens neither alone nor through a job built now."""
    assert run_id not in run_keys.run_ids(gw.store)
    submitted = submission(gw, run_id)
    blob = submitted.sealed_secrets or ""
    key = sealing_key(gw.settings)
    master = load_master_key(None, gw.settings.data_dir)
    for purpose in (SEALED_SECRETS, SECRETS_AT_REST, DOWNLOAD_URLS):
        with pytest.raises(SealError):
            unseal(blob, derive_key(master, purpose))
    with pytest.raises(SealError):
        decrypt("v1." + blob.split(".", 1)[1], key)
    scheduled = events_of(gw, run_id, "AttemptScheduled")[0].payload()
    job = build_job(submitted, scheduled, scheduler._job_secrets(submitted))  # type: ignore[arg-type]
    with pytest.raises(SealError):
        open_job_secrets(job, gw.settings)


def finish_all(scheduler: RunScheduler, gw: Gateway, run_id: str) -> None:
    reports = [
        AttemptReport(
            kind="finished", run_id=run_id, attempt_id=e.data["attempt_id"], try_number=1,
            executor_id="exec-test", outcome="passed",
        )
        for e in events_of(gw, run_id, "AttemptScheduled")
    ]  # fmt: skip
    scheduler.on_reports(reports)


def test_a_running_runs_jobs_open_their_secrets_and_the_ended_run_is_shredded(gateway: Gateway) -> None:
    gw = gateway
    run_id = submit_with_secrets(gw)
    rows = gw.raw_rows("run_keys")
    assert [r["run_id"] for r in rows] == [run_id] and rows[0]["wrapped_key"].startswith("v1.")
    assert not [v for v in EXPECTED.values() if v in json.dumps(rows) + gw.all_event_json()]
    blob = submission(gw, run_id).sealed_secrets or ""
    assert blob.startswith("run1.")
    with pytest.raises(SealError):
        unseal(blob, sealing_key(gw.settings))  # never sealed with a master-derived key

    scheduler = RunScheduler(gw.store)
    scheduler.decide(run_id, aggregate.decide_on_submitted)
    scheduled = events_of(gw, run_id, "AttemptScheduled")
    assert len(scheduled) == 4
    jobs = [scheduler.job_for(e) for e in scheduled]
    for job in jobs:
        assert job is not None and job.sealed_secrets and job.sealed_secrets.startswith("env1.")
        assert not [v for v in EXPECTED.values() if v in job.model_dump_json()]
        assert open_job_secrets(job, gw.settings) == EXPECTED
        # What the executor's worker does today (plain `unseal` with the sealing subkey) works too.
        assert unseal(job.sealed_secrets, sealing_key(gw.settings)) == EXPECTED

    finish_all(scheduler, gw, run_id)
    (completed,) = events_of(gw, run_id, "RunExecutionCompleted")
    assert run_id in run_keys.run_ids(gw.store), "the key lives until the end event is handled"
    assert scheduler.on_run_ended(completed) is True
    assert scheduler.on_run_ended(completed) is False  # a redelivery is a no-op
    assert scheduler.job_for(scheduled[0]) is None
    assert_shredded(gw, scheduler, run_id)


# Every end event some service emits: the scheduler's RunExecutionCompleted and RunStopped, scoring's
# RunFinished. RunFailed is handled too, but no service emits it yet, so no test invents one.
@pytest.mark.parametrize("ending", ["stopped", "completed", "finished"])
def test_every_way_a_run_ends_deletes_its_key(pg_gateway: Gateway, ending: str) -> None:
    gw = pg_gateway
    scheduler = RunScheduler(gw.store)
    run_id = submit_with_secrets(gw)
    bystander = submit_with_secrets(gw)
    for each in (run_id, bystander):
        scheduler.decide(each, aggregate.decide_on_submitted)
    end: Any
    if ending == "stopped":
        gw.ok(gw.v1("POST", f"/runs/{run_id}/stop"), 202)
        scheduler.decide(run_id, aggregate.decide_on_stop_requested)
        (end,) = events_of(gw, run_id, "RunStopped")
    elif ending == "completed":
        finish_all(scheduler, gw, run_id)
        (end,) = events_of(gw, run_id, "RunExecutionCompleted")
    else:
        finish_all(scheduler, gw, run_id)
        Scorer(gw.store).on_event(events_of(gw, run_id, "RunExecutionCompleted")[0])
        (end,) = events_of(gw, run_id, "RunFinished")
    assert scheduler.on_run_ended(end) is True
    assert_shredded(gw, scheduler, run_id)
    assert run_keys.run_ids(gw.store) == [bystander], "a running run keeps its key"
    job = scheduler.job_for(events_of(gw, bystander, "AttemptScheduled")[0])
    assert job is not None and open_job_secrets(job, gw.settings) == EXPECTED


def test_start_up_sweep_deletes_keys_of_runs_that_ended_unseen(pg_gateway: Gateway) -> None:
    """An end event the purge consumer never got (e.g. aged out of EVENTS) is caught at start-up."""
    gw = pg_gateway
    ended = submit_with_secrets(gw)
    running = submit_with_secrets(gw)
    gw.progress(ended, finish=True)
    scheduler = RunScheduler(gw.store)
    scheduler.decide(running, aggregate.decide_on_submitted)
    assert sorted(run_keys.run_ids(gw.store)) == sorted([ended, running])
    assert scheduler.purge_ended_runs() == [ended]
    assert run_keys.run_ids(gw.store) == [running]
    assert_shredded(gw, scheduler, ended)


def test_a_run_without_secrets_has_no_key_row(pg_gateway: Gateway) -> None:
    gw = pg_gateway
    gw.benchmark("demo", ["t1"])
    run_id = gw.submit(demo_config())["id"]
    assert gw.raw_rows("run_keys") == [] and submission(gw, run_id).sealed_secrets is None
