"""Issue 16, finding 7: the web UI's cookie-authenticated requests cannot be forged from another site,
its session cookie is Secure behind HTTPS, its pages cannot be framed or run injected script, and a
huge log cursor is a 400 naming the parameter, not a 500."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from regatta_gateway.app import create_app

from .conftest import ADMIN_TOKEN, Gateway, demo_config, make_settings
from .test_hostile_input import Unchanged, refused

EVIL = "https://evil.example"
CROSS_SITE = [
    {"Origin": EVIL},
    {"Origin": EVIL, "Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "same-site"},
    {"Origin": "null"},
]


@pytest.mark.parametrize("headers", CROSS_SITE, ids=["origin", "fetch-metadata", "same-site", "null-origin"])
def test_cross_site_form_posts_are_refused_and_change_nothing(gateway: Gateway, headers: dict) -> None:
    client = gateway.client
    # Login CSRF: the attacker's page signs the victim in with the attacker's token.
    with Unchanged(gateway):
        response = client.post(
            "/signin",
            data={"token": ADMIN_TOKEN, "next": "/benchmarks"},
            headers=headers,
            follow_redirects=False,
        )
        refused(response, 403, "Origin")
        assert "set-cookie" not in response.headers
    # Forced sign-out and workspace switch of a signed-in victim.
    client.cookies.set("regatta_token", ADMIN_TOKEN)
    for path, data in (("/signout", {}), ("/workspace", {"workspace": "default"})):
        response = client.post(path, data=data, headers=headers, follow_redirects=False)
        refused(response, 403, "Origin")
        assert "set-cookie" not in response.headers
    # The UI's API calls with the cookie: the UI header alone is not enough from another site.
    with Unchanged(gateway):
        response = client.post(
            "/api/v1/benchmarks",
            json={"source_type": "folder", "path": "/srv/benchmarks/x", "name": "x"},
            headers={**headers, "X-Regatta-UI": "1"},
        )
        refused(response, 403, "Origin")
    client.cookies.clear()


def test_same_origin_sign_in_and_clients_without_browser_headers_still_work(gateway: Gateway) -> None:
    client = gateway.client
    for headers in ({"Origin": "http://testserver"}, {"Sec-Fetch-Site": "same-origin"}, {}):
        response = client.post(
            "/signin", data={"token": ADMIN_TOKEN}, headers=headers, follow_redirects=False
        )
        assert response.status_code == 303, response.text
        assert "regatta_token=" in response.headers["set-cookie"]
        assert "secure" not in response.headers["set-cookie"].lower()  # plain HTTP, no public https URL
    # A bearer token is never ambient: scripts from anywhere keep working.
    response = gateway.v1("GET", "/benchmarks", headers={"Origin": EVIL})
    assert response.status_code == 200


def test_the_session_cookie_is_secure_over_https(gateway: Gateway) -> None:
    response = gateway.client.post(
        "https://testserver/signin",
        data={"token": ADMIN_TOKEN},
        headers={"Origin": "https://testserver"},
        follow_redirects=False,
    )
    assert response.status_code == 303, response.text
    assert "; secure" in response.headers["set-cookie"].lower()


def test_the_session_cookie_is_secure_behind_a_tls_proxy(
    database_url: str, nats_url: str, tmp_path: Path
) -> None:
    """The proxy speaks plain HTTP to the gateway; REGATTA_PUBLIC_URL says browsers use HTTPS."""
    settings = make_settings(database_url, nats_url, tmp_path / "data")
    settings.public_url = "https://regatta.example"
    with TestClient(create_app(settings)) as client:
        response = client.post(
            "/signin",
            data={"token": ADMIN_TOKEN},
            headers={"Origin": "https://regatta.example"},
            follow_redirects=False,
        )
    assert response.status_code == 303, response.text
    assert "; secure" in response.headers["set-cookie"].lower()


def test_pages_cannot_be_framed_or_run_injected_script(gateway: Gateway) -> None:
    gateway.client.cookies.set("regatta_token", ADMIN_TOKEN)
    try:
        for path in ("/signin", "/benchmarks", "/secrets"):
            response = gateway.client.get(path, follow_redirects=False)
            assert response.status_code == 200, (path, response.status_code)
            policy = response.headers["content-security-policy"]
            assert "frame-ancestors 'none'" in policy and "script-src 'self'" in policy
            assert "unsafe-inline" not in policy.split("script-src", 1)[1].split(";", 1)[0]
            assert response.headers["x-frame-options"] == "DENY"
            assert response.headers["x-content-type-options"] == "nosniff"
    finally:
        gateway.client.cookies.clear()


@pytest.mark.parametrize("cursor", ["9" * 40, str(2**63), "-5", "0", "1e9", "12abc"])
def test_a_huge_or_malformed_log_cursor_is_a_400_naming_it(gateway: Gateway, cursor: str) -> None:
    gateway.benchmark("demo", ["t1"])
    run_id = gateway.submit(demo_config())["id"]
    gateway.settle()
    refused(gateway.v1("GET", f"/runs/{run_id}/logs", params={"cursor": cursor}), 400, "cursor")
    # A cursor the API handed out still pages.
    assert gateway.ok(gateway.v1("GET", f"/runs/{run_id}/logs", params={"cursor": str(2**63 - 1)}))["logs"]
