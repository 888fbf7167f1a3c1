"""The secrets store: encrypted at rest, resolved personal-over-workspace, sealed into runs, never shown."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest
from regatta_gateway.errors import NotFound
from regatta_gateway.readmodels import ReadModels
from regatta_gateway.secrets.store import resolve_secrets
from regatta_shared.eventstore.projections import ProjectionRunner
from regatta_shared.security import run_keys
from regatta_shared.security.sealing import (
    SealError,
    decrypt,
    load_master_key,
    open_for_run,
    sealing_key,
    unseal,
    unwrap_run_key,
)

from .conftest import ADMIN_TOKEN, Gateway, demo_config
from .service_support import Services, refused
from .test_cli_contract import flat_error


@pytest.fixture
def gateway(gateway_on_both: Gateway) -> Gateway:
    """Both backends: the secrets are stored and resolved through each store's own tables."""
    return gateway_on_both


WORKSPACE_VALUE = "ws-value-8f3a1c77e2"
PERSONAL_VALUE = "personal-value-1b9d64aa05"
PROVIDED_VALUE = "provided-value-5e2c90d1f4"
JUDGE_VALUE = "judge-value-0c4b7d3e88"


def set_secret(gw: Gateway, name: str, value: str, scope: str, token: str = ADMIN_TOKEN) -> None:
    gw.ok(
        gw.cli(
            "POST", "/environment-secrets", json={"name": name, "value": value, "scope": scope}, token=token
        )
    )


def test_personal_overrides_workspace_and_members_see_only_their_own(gateway: Gateway) -> None:
    gw = gateway
    set_secret(gw, "OPENAI_API_KEY", WORKSPACE_VALUE, "workspace")
    set_secret(gw, "OPENAI_API_KEY", PERSONAL_VALUE, "user")
    set_secret(gw, "JUDGE_KEY", JUDGE_VALUE, "workspace")
    member = gw.member("default", "member@example.com")
    set_secret(gw, "MINE_ONLY", "member-value", "user", token=member)
    vault = gw.client.app.state.vault  # type: ignore[attr-defined]
    admin = _scope(gw, ADMIN_TOKEN)
    values, scopes, missing = resolve_secrets(
        vault, admin, ["OPENAI_API_KEY", "JUDGE_KEY", "MINE_ONLY", "NOPE"]
    )
    assert values == {"OPENAI_API_KEY": PERSONAL_VALUE, "JUDGE_KEY": JUDGE_VALUE}
    assert scopes == {"OPENAI_API_KEY": "user_override", "JUDGE_KEY": "workspace"}
    assert missing == ["MINE_ONLY", "NOPE"]
    values, scopes, missing = resolve_secrets(vault, _scope(gw, member), ["OPENAI_API_KEY", "MINE_ONLY"])
    assert values == {"OPENAI_API_KEY": WORKSPACE_VALUE, "MINE_ONLY": "member-value"}
    assert scopes == {"OPENAI_API_KEY": "workspace", "MINE_ONLY": "user"}
    assert missing == []
    listed = gw.ok(gw.cli("GET", "/environment-secrets?scope=all", token=member))["environment_secrets"]
    assert {(s["name"], s["scope"]) for s in listed} == {
        ("OPENAI_API_KEY", "workspace"),
        ("JUDGE_KEY", "workspace"),
        ("MINE_ONLY", "user"),
    }


def _scope(gw: Gateway, token: str):
    from regatta_gateway.authentication import authenticate, resolve_scope

    return resolve_scope(gw.store, authenticate(gw.store, f"Bearer {token}"), "default")


def test_secret_values_appear_only_as_ciphertext(gateway: Gateway) -> None:
    gw = gateway
    gw.benchmark("demo", ["t1", "t2"])
    set_secret(gw, "OPENAI_API_KEY", WORKSPACE_VALUE, "workspace")
    set_secret(gw, "OPENAI_API_KEY", PERSONAL_VALUE, "user")
    set_secret(gw, "VERIFIER_TOKEN", JUDGE_VALUE, "workspace")
    config = demo_config(
        execution_config={"verifier_secrets": ["VERIFIER_TOKEN"]},
        secrets={"required": ["RUN_ONLY"], "provided": {"RUN_ONLY": PROVIDED_VALUE}},
    )
    config["agents"][0] = {
        "harness": "oracle",
        "model": {"type": "provider", "model": "openai/gpt-4o", "api_key_secret": "OPENAI_API_KEY"},
        "env": {},
    }
    created = gw.submit(config)
    gw.progress(created["id"], artifacts={"agent/trajectory.json": b"{}"})
    values = (WORKSPACE_VALUE, PERSONAL_VALUE, JUDGE_VALUE, PROVIDED_VALUE)

    events = gw.all_event_json()
    assert not [v for v in values if v in events]
    stored = gw.raw_rows("secret_values")
    assert len(stored) == 3
    assert all(row["ciphertext"].startswith("v1.") for row in stored)
    assert not [v for v in values if v in json.dumps(stored, default=str)]

    submitted = next(e for e in gw.store.read_stream(f"run-{created['id']}") if e.type == "RunSubmitted").data
    # Sealed with the run's own key (run_keys, shredded when the run ends), not a master-derived one.
    wrapped = run_keys.wrapped_key(gw.store, created["id"]) or ""
    run_key = unwrap_run_key(wrapped, sealing_key(gw.settings), created["id"])
    with pytest.raises(SealError):
        unseal(submitted["sealed_secrets"], sealing_key(gw.settings))
    assert open_for_run(submitted["sealed_secrets"], run_key, created["id"]) == {
        "OPENAI_API_KEY": PERSONAL_VALUE,
        "VERIFIER_TOKEN": JUDGE_VALUE,
        "RUN_ONLY": PROVIDED_VALUE,
    }
    assert submitted["secret_scopes"] == {"OPENAI_API_KEY": "user_override", "VERIFIER_TOKEN": "workspace"}
    assert set(submitted["secret_names"]) == {"OPENAI_API_KEY", "VERIFIER_TOKEN", "RUN_ONLY"}

    responses = [
        gw.cli("GET", "/environment-secrets?scope=all"),
        gw.cli("GET", f"/benchmark-runs/{created['id']}"),
        gw.cli("GET", "/benchmark-runs"),
        gw.cli("GET", f"/benchmark-runs/{created['id']}/logs?limit=200&direction=older"),
        gw.v1("GET", f"/runs/{created['id']}"),
        gw.v1("GET", f"/runs/{created['id']}/attempts"),
        gw.v1("GET", "/secrets"),
    ]
    manifest = gw.ok(gw.v1("GET", f"/runs/{created['id']}/downloads", params={"types": "all"}))
    responses += [gw.client.get(item["url"]) for item in manifest["files"]]
    for response in responses:
        assert response.status_code == 200, response.text
        assert not [v for v in values if v in response.text], response.request.url
        assert "sealed_secrets" not in response.text and submitted["sealed_secrets"] not in response.text
        assert wrapped not in response.text
    detail = gw.ok(gw.cli("GET", f"/benchmark-runs/{created['id']}"))
    assert detail["configuration"]["resolved_secret_scopes"] == submitted["secret_scopes"]


def test_missing_secrets_are_named_and_nothing_is_stored(services: Services) -> None:
    sv = services
    sv.benchmark("demo", ["t1"])
    sv.set_secret("PRESENT", "v", "workspace")
    before = sv.event_count()
    config = demo_config(execution_config={"verifier_secrets": ["PRESENT", "B_MISSING"]})
    config["agents"][0]["model"] = {"type": "provider", "model": "m", "api_key_secret": "A_MISSING"}
    error = refused(lambda: sv.submit(config), NotFound, "NOT_FOUND")
    assert error.message == "Secret(s) not found: A_MISSING, B_MISSING"
    assert error.field == "agents.0.model.api_key_secret"
    assert sv.event_count() == before


def test_ciphertext_is_bound_to_its_record(gateway: Gateway) -> None:
    gw = gateway
    set_secret(gw, "FIRST", "first-value", "workspace")
    set_secret(gw, "SECOND", "second-value", "workspace")
    rows = {row["name"]: row for row in gw.raw_rows("secret_values")}
    key = gw.client.app.state.vault.key  # type: ignore[attr-defined]
    with pytest.raises(SealError):
        decrypt(rows["FIRST"]["ciphertext"], key, b"\x1f".join(s.encode() for s in _record(rows["SECOND"])))
    assert (
        decrypt(rows["FIRST"]["ciphertext"], key, "\x1f".join(_record(rows["FIRST"])).encode())
        == b"first-value"
    )


def _record(row: dict) -> tuple[str, str, str, str]:
    return (row["workspace_id"], row["scope"], row["owner"], row["name"])


def test_projection_rebuild_keeps_the_secret_values(pg_gateway: Gateway) -> None:
    gw = pg_gateway
    set_secret(gw, "KEEP_ME", "kept", "workspace")
    ProjectionRunner(gw.store, ReadModels()).rebuild()
    assert [row["name"] for row in gw.raw_rows("secret_values")] == ["KEEP_ME"]
    listed = gw.ok(gw.cli("GET", "/environment-secrets?scope=workspace"))["environment_secrets"]
    assert [s["name"] for s in listed] == ["KEEP_ME"]


def test_master_key_file_is_private_shared_and_overridable(tmp_path: Path) -> None:
    keys: list[bytes] = []
    threads = [
        threading.Thread(target=lambda: keys.append(load_master_key(None, tmp_path))) for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(keys)) == 1 and len(keys[0]) >= 32
    path = tmp_path / "master.key"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["master.key"]
    assert load_master_key(None, tmp_path) == keys[0]
    assert load_master_key("an-operator-chosen-key", tmp_path) == b"an-operator-chosen-key"
    assert load_master_key("  ", tmp_path) == keys[0]
    with pytest.raises(ValueError, match="at least 16"):
        load_master_key("short", tmp_path)


def test_only_admins_write_workspace_secrets(pg_gateway: Gateway) -> None:
    gw = pg_gateway
    member = gw.member("default", "member@example.com")
    before = gw.event_count()
    body = {"name": "SHARED", "value": "v", "scope": "workspace"}
    flat_error(gw.cli("POST", "/environment-secrets", json=body, token=member), 403, "FORBIDDEN")
    flat_error(gw.v1("POST", "/secrets", json=body, token=member), 403, "FORBIDDEN")
    assert gw.event_count() == before and gw.raw_rows("secret_values") == []
