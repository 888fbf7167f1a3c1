"""Users in several workspaces: listing them, choosing one per request (API) or per session (web UI).
Who may list a workspace's members is a rule of the service layer, tested there; choosing a workspace by a
request's header or a session's cookie is how a request is decoded, so it stays on HTTP."""

from __future__ import annotations

from regatta_gateway.errors import NotFound
from regatta_gateway.queries.members import member_list

from .conftest import ADMIN_TOKEN, Gateway
from .service_support import Services, refused

UI = {"X-Regatta-UI": "1"}


def names(gw: Gateway, token: str, workspace: str | None = None) -> list[tuple[str, str, bool]]:
    listed = gw.ok(gw.v1("GET", "/workspaces", token=token, workspace=workspace))["workspaces"]
    return [(w["name"], w["role"], w["current"]) for w in listed]


def test_a_user_lists_only_their_workspaces_and_the_header_picks_the_current_one(gateway: Gateway) -> None:
    gateway.workspace("team-b")
    gateway.workspace("alpha")
    bob = gateway.member("team-b", "bob@example.com")

    # Listed by name; without a header the request acts in the bootstrap workspace, the admin's first.
    assert names(gateway, ADMIN_TOKEN) == [
        ("alpha", "admin", False),
        ("default", "admin", True),
        ("team-b", "admin", False),
    ]
    assert [current for *_, current in names(gateway, ADMIN_TOKEN, "team-b")] == [False, False, True]
    assert names(gateway, bob) == [("team-b", "member", True)]
    refused = gateway.v1("GET", "/workspaces", token=bob, workspace="alpha")
    assert refused.status_code == 404
    assert refused.json()["code"] == "WORKSPACE_SCOPE_HEADER_ACCESS_DENIED"


def test_members_of_a_workspace_are_listed_to_its_members_only(services: Services) -> None:
    """GET /api/v1/workspaces/{key}/members is `resolve_scope` (is the caller in it?) then `member_list`."""
    sv = services
    sv.workspace("team-b")
    bob = sv.member("team-b", "bob@example.com")
    carol = sv.member("default", "carol@example.com", role="admin")

    listed = member_list(sv.store, sv.scope(bob, "team-b").workspace_id)
    assert [(m["email"], m["role"]) for m in listed] == [
        ("admin@localhost", "admin"),
        ("bob@example.com", "member"),
    ]
    assert set(listed[0]) == {"user_id", "email", "name", "role"}
    refused(lambda: sv.scope(carol, "team-b"), NotFound, "WORKSPACE_SCOPE_HEADER_ACCESS_DENIED")


def test_the_web_ui_switches_workspace_for_its_pages_and_their_api_calls(gateway: Gateway) -> None:
    team_b = gateway.workspace("team-b")
    gateway.benchmark("only-in-default", ["t1"])
    gateway.benchmark("only-in-team-b", ["t1"], workspace="team-b")
    client = gateway.client
    client.cookies.set("regatta_token", ADMIN_TOKEN)

    page = client.get("/benchmarks")
    assert page.status_code == 200
    assert 'data-testid="workspace-select"' in page.text
    assert "only-in-default" in page.text and "only-in-team-b" not in page.text

    switched = client.post("/workspace", data={"workspace": team_b}, follow_redirects=False)
    assert switched.status_code == 303 and switched.headers["location"] == "/benchmarks"
    assert client.cookies.get("regatta_workspace") == team_b
    page = client.get("/benchmarks")
    assert "only-in-team-b" in page.text and "only-in-default" not in page.text
    assert f'<option value="{team_b}" selected>' in page.text
    # The page's scripts call the API with the cookies only: they act in the same workspace.
    listed = client.get("/api/v1/benchmarks", headers=UI).json()["benchmarks"]
    assert [b["name"] for b in listed] == ["only-in-team-b"]
    # A script naming a workspace itself keeps it.
    listed = client.get("/api/v1/benchmarks", headers={**UI, "X-Regatta-Workspace": "default"}).json()
    assert [b["name"] for b in listed["benchmarks"]] == ["only-in-default"]


def test_a_workspace_the_user_is_not_in_is_refused_and_changes_nothing(gateway: Gateway) -> None:
    other = gateway.workspace("other")
    carol = gateway.member("default", "carol@example.com")
    client = gateway.client
    client.cookies.set("regatta_token", carol)

    refused = client.post("/workspace", data={"workspace": other}, follow_redirects=False)
    assert refused.status_code == 404
    assert "regatta_workspace" not in client.cookies
    # Carol is in one workspace only: no switcher.
    assert 'data-testid="workspace-select"' not in client.get("/benchmarks").text

    # A forged cookie naming someone else's workspace: pages fall back to the user's own workspace,
    # API calls are refused, and nothing of the other workspace is shown.
    gateway.benchmark("secret-plans", ["t1"], workspace="other")
    client.cookies.set("regatta_workspace", other)
    page = client.get("/benchmarks")
    assert page.status_code == 200 and "secret-plans" not in page.text
    api = client.get("/api/v1/benchmarks", headers=UI)
    assert api.status_code == 404 and api.json()["code"] == "WORKSPACE_SCOPE_HEADER_ACCESS_DENIED"


def test_signing_out_forgets_the_chosen_workspace(gateway: Gateway) -> None:
    team_b = gateway.workspace("team-b")
    client = gateway.client
    client.cookies.set("regatta_token", ADMIN_TOKEN)
    client.post("/workspace", data={"workspace": team_b}, follow_redirects=False)
    assert client.cookies.get("regatta_workspace") == team_b
    signed_out = client.post("/signout", follow_redirects=False)
    cleared = [c for c in signed_out.headers.get_list("set-cookie") if "Max-Age=0" in c]
    assert sorted(c.split("=", 1)[0] for c in cleared) == ["regatta_token", "regatta_workspace"]
    assert "regatta_workspace" not in client.cookies
