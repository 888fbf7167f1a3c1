"""Issue 16, finding 6: weak defaults and guessing.

Failed authentications are throttled per source address and per token prefix (429 with Retry-After)
while good requests never are; bootstrap ids are random, not derived from the bootstrap token, and a
deployment bootstrapped with derived ids keeps working; well-known placeholder secrets are refused.
"""

from __future__ import annotations

import hashlib
import secrets
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from regatta_gateway.app import create_app
from regatta_gateway.authentication import authenticate
from regatta_shared.events import ApiTokenCreated, MemberAdded, UserRegistered, WorkspaceCreated
from regatta_shared.events.envelope import deterministic_id, new_event
from regatta_shared.eventstore import EventStore
from regatta_shared.ids import workspace_stream
from regatta_shared.security.sealing import load_master_key

from .conftest import ADMIN_TOKEN, Gateway, make_settings

BURST = 20  # REGATTA_AUTH_FAILURE_BURST's default


def _statuses(responses: list) -> dict[int, int]:
    counts: dict[int, int] = {}
    for response in responses:
        counts[response.status_code] = counts.get(response.status_code, 0) + 1
    return counts


def test_300_bad_tokens_are_throttled_per_source_and_change_nothing(gateway: Gateway) -> None:
    before = gateway.event_count()
    responses = [gateway.v1("GET", "/benchmarks", token=f"rg_{secrets.token_hex(16)}") for _ in range(300)]
    counts = _statuses(responses)
    # The bucket drains a failure every 3 s, so a slow machine may see one or two more 401s.
    assert set(counts) == {401, 429} and BURST <= counts[401] <= BURST + 3, counts
    throttled = responses[-1]
    assert int(throttled.headers["Retry-After"]) >= 1
    assert throttled.json()["code"] == "RATE_LIMITED"
    assert gateway.event_count() == before
    # The throttle is the guesser's: another address with a good token is served as before.
    other = TestClient(gateway.client.app, client=("203.0.113.9", 40000))
    good = other.get("/api/v1/benchmarks", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    assert good.status_code == 200, good.text


def test_100_bad_sign_ins_are_throttled(gateway: Gateway) -> None:
    before = gateway.event_count()
    responses = [
        gateway.client.post("/signin", data={"token": f"guess-{n}"}, follow_redirects=False)
        for n in range(100)
    ]
    counts = _statuses(responses)
    assert set(counts) == {401, 429} and BURST <= counts[401] <= BURST + 3, counts
    assert "Retry-After" in responses[-1].headers
    assert all("set-cookie" not in r.headers for r in responses)
    assert gateway.event_count() == before


def test_guesses_at_one_token_prefix_from_many_addresses_are_throttled(gateway: Gateway) -> None:
    prefix = ADMIN_TOKEN[:8]
    statuses = []
    for n in range(BURST + 5):
        client = TestClient(gateway.client.app, client=(f"198.51.100.{n + 1}", 40000))
        guess = f"{prefix}{secrets.token_hex(8)}"
        statuses.append(
            client.get("/api/v1/benchmarks", headers={"Authorization": f"Bearer {guess}"}).status_code
        )
    assert statuses[:BURST] == [401] * BURST and statuses[-1] == 429 and statuses.count(429) >= 3, statuses


def test_many_good_requests_and_requests_without_credentials_are_never_throttled(gateway: Gateway) -> None:
    for _ in range(BURST * 5):
        assert gateway.v1("GET", "/benchmarks").status_code == 200
    # No credential at all is not a guess: 401 every time, never 429.
    statuses = {gateway.client.get("/api/v1/benchmarks").status_code for _ in range(BURST * 2)}
    assert statuses == {401}


# --- bootstrap ids and default secrets ------------------------------------------------------------------


def _seed(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()[:16]


def _admin_ids(gw: Gateway) -> tuple[str, str]:
    workspaces = gw.ok(gw.v1("GET", "/workspaces"))["workspaces"]
    return workspaces[0]["id"], authenticate(gw.store, f"Bearer {ADMIN_TOKEN}").user_id


def test_bootstrap_ids_are_random_and_stable_across_restarts(
    database_url: str, nats_url: str, tmp_path: Path
) -> None:
    settings = make_settings(database_url, nats_url, tmp_path / "data")
    with TestClient(create_app(settings)) as client:
        gw = Gateway(client, settings)
        first = _admin_ids(gw)
        events = gw.all_event_json()
        count = gw.event_count()
    assert _seed(ADMIN_TOKEN) not in first[0] and _seed(ADMIN_TOKEN) not in first[1]
    # Nothing the token derives appears as an id or event id anywhere (its full hash is the token record).
    assert events.count(_seed(ADMIN_TOKEN)) == 1
    with TestClient(create_app(settings)) as client:
        gw = Gateway(client, settings)
        assert _admin_ids(gw) == first
        assert gw.event_count() == count, "a restart appends nothing"


def test_a_deployment_bootstrapped_with_derived_ids_keeps_working(
    database_url: str, nats_url: str, tmp_path: Path
) -> None:
    """The events an older gateway recorded (ids from the token's hash): found, not duplicated."""
    settings = make_settings(database_url, nats_url, tmp_path / "data")
    token_hash = hashlib.sha256(ADMIN_TOKEN.encode()).hexdigest()
    seed = token_hash[:16]
    store = EventStore(settings.resolved_database_url)
    store.create_schema()
    old = [
        (WorkspaceCreated(workspace_id=f"ws_{seed}", name="default"), "workspace"),
        (UserRegistered(user_id=f"usr_{seed}", email="admin@localhost", name="admin"), "user"),
        (MemberAdded(workspace_id=f"ws_{seed}", user_id=f"usr_{seed}", role="admin"), "member"),
        (
            ApiTokenCreated(
                token_id=f"tok_{seed}", user_id=f"usr_{seed}", token_hash=token_hash, name="bootstrap"
            ),
            "token",
        ),
    ]
    store.append(
        workspace_stream(f"ws_{seed}"),
        [new_event(p, event_id=deterministic_id(seed, step), actor="system") for p, step in old],
    )
    store.dispose()
    for _ in range(2):
        with TestClient(create_app(settings)) as client:
            gw = Gateway(client, settings)
            # The old bootstrap admin is made a platform administrator once; nothing else is appended.
            assert gw.event_count() == 5
            assert _admin_ids(gw) == (f"ws_{seed}", f"usr_{seed}")


@pytest.mark.parametrize("token", ["change-me", "CHANGEME", " password "])
def test_a_placeholder_bootstrap_token_is_refused_at_start(
    database_url: str, nats_url: str, tmp_path: Path, token: str
) -> None:
    settings = make_settings(database_url, nats_url, tmp_path / "data")
    settings.bootstrap_token = token
    refused = pytest.raises(ValueError, match="REGATTA_BOOTSTRAP_TOKEN is a well-known placeholder")
    with refused, TestClient(create_app(settings)):
        pass
    store = EventStore(settings.resolved_database_url)
    store.create_schema()
    assert store.last_position() == 0, "nothing was bootstrapped"
    store.dispose()


@pytest.mark.parametrize("key", ["change-me-master-key", "change-me"])
def test_a_placeholder_master_key_is_refused(tmp_path: Path, key: str) -> None:
    with pytest.raises(ValueError, match="REGATTA_MASTER_KEY is a well-known placeholder"):
        load_master_key(key, tmp_path)
    assert not (tmp_path / "master.key").exists()
