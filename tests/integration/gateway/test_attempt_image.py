"""Issue 27: the image an attempt ran, as its executor reported it, is recorded on AttemptFinished by
the run scheduler and shown in the attempt's API detail; events recorded before it still read."""

from __future__ import annotations

from regatta_run_scheduler import run as aggregate
from regatta_run_scheduler.scheduler import RunScheduler
from regatta_shared.events import AttemptFinished, AttemptImage
from regatta_shared.ids import run_stream
from regatta_shared.messaging.jobs import AttemptReport

from .conftest import Gateway, demo_config

IMAGE = AttemptImage(
    reference="debian:bookworm-slim",
    image_id="sha256:" + "ab" * 32,
    registry_digest="debian@sha256:" + "cd" * 32,
    source="pulled",
)


def test_the_reported_image_is_on_the_attempt_and_in_its_api_detail(gateway: Gateway) -> None:
    gw = gateway
    gw.benchmark("demo", ["t1"])
    run_id = gw.submit(demo_config())["id"]
    scheduler = RunScheduler(gw.store)
    scheduler.decide(run_id, aggregate.decide_on_submitted)
    scheduled = [e for e in gw.store.read_stream(run_stream(run_id)) if e.type == "AttemptScheduled"]
    with_image, without = scheduled[0].data["attempt_id"], scheduled[1].data["attempt_id"]
    scheduler.on_reports(
        [
            AttemptReport(
                kind="finished", run_id=run_id, attempt_id=aid, try_number=1, executor_id="exec-test",
                outcome="passed", environment="container", image=IMAGE if aid == with_image else None,
            )
            for aid in (with_image, without)
        ]
    )  # fmt: skip
    finished = {
        e.data["attempt_id"]: e.payload()
        for e in gw.store.read_stream(run_stream(run_id))
        if e.type == "AttemptFinished"
    }
    assert finished[with_image].image == IMAGE  # type: ignore[union-attr]
    assert finished[without].image is None  # type: ignore[union-attr]
    gw.settle()
    rows = {r["attempt_id"]: r for r in gw.ok(gw.v1("GET", f"/runs/{run_id}/attempts"))["attempts"]}
    assert rows[with_image]["result"]["image"] == IMAGE.model_dump()
    assert rows[without]["result"]["image"] is None


def test_an_attempt_finished_recorded_before_images_were_still_reads() -> None:
    old = {
        "run_id": "run_x", "attempt_id": "att_x", "agent_index": 0, "task": "t1", "attempt_index": 0,
        "try_number": 1, "outcome": "failed", "environment": "container",
    }  # fmt: skip
    assert AttemptFinished.model_validate(old).image is None
