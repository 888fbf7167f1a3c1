"""Issue 6: webhooks (signed, retried, never blocking runs), budget refusal, audit trail, live updates."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from regatta_gateway.notifications.notices import SIGNATURE_HEADER, verify

from tests.e2e.test_spine import DEMO
from tests.e2e.web_ui_support import ACK_WAIT
from tests.support.tasks import run_toml


class Receiver:
    """A webhook receiver on 127.0.0.1 that records what it gets and answers with a fixed status."""

    def __init__(self, status: int) -> None:
        self.received: list[tuple[dict[str, str], bytes, float]] = []
        received, answer = self.received, status

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.append((dict(self.headers), body, time.monotonic()))
                reply = b"receiver-internal-detail"  # never copied into the delivery log
                self.send_response(answer)
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *_: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def close(self) -> None:
        self.server.shutdown()


def test_webhooks_are_signed_retried_and_never_block_runs(make_stack, api_for) -> None:
    # The receivers are on 127.0.0.1: named in the outbound allow-list, as a deployment would.
    stack = make_stack(executors=1, REGATTA_WEBHOOK_BASE_DELAY="0.3", REGATTA_OUTBOUND_ALLOW="127.0.0.1")
    api = api_for(stack)
    good, bad = Receiver(200), Receiver(500)
    try:
        hooks = {}
        for name, receiver in (("good", good), ("bad", bad)):
            response = api.http.post(
                "/api/v1/webhooks", json={"url": receiver.url, "kinds": ["run.finished"]}
            )
            assert response.status_code == 201, response.text
            hooks[name] = response.json()
        api.benchmark_ready("regatta-examples")
        created = api.submit_toml(DEMO.replace("attempts_per_task = 2", "attempts_per_task = 1"))
        detail = api.wait_run(created["id"])
        assert detail["benchmark_run"]["status"] == "finished"

        headers, body, _ = api.wait_for(lambda: good.received and good.received[0], timeout=30)
        key = bytes.fromhex(hooks["good"]["signing_secret"])
        assert verify(key, headers[SIGNATURE_HEADER], body)
        assert not verify(key, headers[SIGNATURE_HEADER], body.replace(b"finished", b"stopped"))
        payload = json.loads(body)
        assert payload["kind"] == "run.finished" and payload["data"]["run_id"] == created["id"]

        log = api.wait_for(
            lambda: (
                [
                    d
                    for d in api.get(f"/webhooks/{hooks['bad']['id']}/deliveries")["deliveries"]
                    if d["attempt"] >= 3
                ]
                and api.get(f"/webhooks/{hooks['bad']['id']}/deliveries")["deliveries"]
            ),
            timeout=60,
        )
        attempts = sorted(d["attempt"] for d in log)
        assert attempts[:3] == [1, 2, 3] and not any(d["delivered"] for d in log)
        assert all(d["status_code"] == 500 for d in log)
        assert all(d.get("error") in (None, "HTTP 500") for d in log), "the receiver's body is not logged"
        # Backoff from the delivery log's recorded delays; the receiver's clock only bounds them from below
        # (a sleep is never shorter than asked, however loaded the machine), so load cannot fail this.
        delays = [d["retry_in_seconds"] for d in sorted(log, key=lambda d: d["attempt"])[:2]]
        assert delays[1] > delays[0] >= 0.3, "retries back off"
        times = [t for _, _, t in bad.received]
        assert times[1] - times[0] >= delays[0] and times[2] - times[1] >= delays[1]
        good_log = api.get(f"/webhooks/{hooks['good']['id']}/deliveries")["deliveries"]
        assert [(d["attempt"], d["delivered"], d["status_code"]) for d in good_log] == [(1, True, 200)]
    finally:
        good.close()
        bad.close()


def test_budget_refuses_submission_and_audit_records_who_did_what(shared_stack, api_for) -> None:
    stack = shared_stack(executors=1, **ACK_WAIT)
    api = api_for(stack)
    api.benchmark_ready("regatta-examples")
    events_before = api.get("/audit", limit=500)["entries"]
    assert api.http.put("/api/v1/workspace/budget", json={"budget_usd": 0}).status_code == 200
    refused = api.http.post(
        "/api/v1/runs", content=DEMO.encode(), headers={"Content-Type": "application/toml"}
    )
    assert refused.status_code == 403, refused.text
    assert refused.json()["code"] == "BILLING_REQUIRED"
    bad = api.http.put("/api/v1/workspace/budget", json={"budget_usd": -1})
    assert bad.status_code == 400 and bad.json()["field"] == "budget_usd"
    assert api.http.put("/api/v1/workspace/budget", json={"budget_usd": None}).json()["exhausted"] is False
    created = api.submit_toml(run_toml("regatta-examples", task_names=["hello-file"]))

    submitted = api.get("/audit", kind="RunSubmitted")["entries"]
    assert [e["actor_name"] for e in submitted] == ["admin"]
    assert created["id"] in submitted[0]["summary"]
    budgets = api.get("/audit", kind="WorkspaceBudgetSet", actor="admin")["entries"]
    assert len(budgets) == 2, "the refused submission recorded nothing; both budget changes did"
    assert len(api.get("/audit", limit=500)["entries"]) > len(events_before)
    future = api.http.get("/api/v1/audit", params={"since": "2999-01-01T00:00:00Z"})
    assert future.status_code == 200 and future.json()["entries"] == []
    assert api.http.get("/api/v1/audit", params={"since": "yesterday"}).status_code == 400


def test_live_progress_is_streamed_until_the_run_ends(shared_stack, api_for) -> None:
    stack = shared_stack(executors=1, **ACK_WAIT)
    api = api_for(stack)
    api.benchmark_ready("regatta-examples")
    created = api.submit_toml(DEMO)
    snapshots = []
    with api.http.stream("GET", f"/api/v1/runs/{created['id']}/stream", timeout=120) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: "):
                snapshots.append(json.loads(line[6:]))
    assert snapshots[-1]["status"] == "finished"
    ingested = [s["progress"]["ingested"] for s in snapshots]
    assert ingested == sorted(ingested) and len(set(ingested)) >= 3, "progress arrived as it happened"
