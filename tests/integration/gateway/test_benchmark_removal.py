"""Who removes a benchmark (issue 37): the member who added it or a workspace admin, nobody else. A refused
removal records nothing; the audit log names who removed what; the benchmark page offers Remove exactly
to those whose removal would be recorded."""

from __future__ import annotations

from regatta_gateway.authentication import authenticate

from .conftest import ADMIN_TOKEN, Gateway


def page_offers_remove(gw: Gateway, token: str, benchmark_id: str) -> bool:
    gw.client.cookies.set("regatta_token", token)
    response = gw.client.get(f"/benchmarks/{benchmark_id}", follow_redirects=False)
    assert response.status_code == 200, response.text
    return 'data-action="remove"' in response.text


def removals(gw: Gateway, benchmark_id: str) -> list[dict[str, object]]:
    entries = gw.ok(gw.v1("GET", "/audit?kind=BenchmarkRemoved"))["entries"]
    return [e for e in entries if f"benchmark_id={benchmark_id}" in str(e["summary"])]


def test_a_member_cannot_remove_a_benchmark_someone_else_added(pg_gateway: Gateway) -> None:
    gw = pg_gateway
    bob = gw.member("default", "bob@example.com")
    by_admin = gw.benchmark("admins-own", ["t1"])
    before = gw.event_count()

    refused = gw.v1("DELETE", f"/benchmarks/{by_admin}", token=bob)
    assert refused.status_code == 403, refused.text
    body = refused.json()
    assert body["code"] == "FORBIDDEN"
    assert "Only the member who added benchmark" in body["message"] and "workspace admin" in body["message"]
    assert gw.event_count() == before
    assert gw.ok(gw.v1("GET", f"/benchmarks/{by_admin}", token=bob))["benchmark"]["id"] == by_admin
    assert removals(gw, by_admin) == []
    assert not page_offers_remove(gw, bob, by_admin)


def test_the_adder_removes_their_own_benchmark_and_the_audit_log_says_so(pg_gateway: Gateway) -> None:
    gw = pg_gateway
    bob = gw.member("default", "bob@example.com")
    carol = gw.member("default", "carol@example.com")
    by_bob = gw.benchmark("bobs-own", ["t1"], token=bob)
    assert page_offers_remove(gw, bob, by_bob)
    assert not page_offers_remove(gw, carol, by_bob)
    assert gw.v1("DELETE", f"/benchmarks/{by_bob}", token=carol).status_code == 403

    assert gw.v1("DELETE", f"/benchmarks/{by_bob}", token=bob).status_code == 204
    assert gw.v1("GET", f"/benchmarks/{by_bob}", token=bob).status_code == 404
    [entry] = removals(gw, by_bob)
    assert entry["actor"] == authenticate(gw.store, f"Bearer {bob}").user_id
    assert entry["actor_name"] != entry["actor"]  # resolved to bob's name, not left as an id


def test_a_workspace_admin_removes_a_members_benchmark(pg_gateway: Gateway) -> None:
    gw = pg_gateway
    bob = gw.member("default", "bob@example.com")
    dana = gw.member("default", "dana@example.com", role="admin")
    by_bob = gw.benchmark("bobs-other", ["t1"], token=bob)
    assert page_offers_remove(gw, ADMIN_TOKEN, by_bob) and page_offers_remove(gw, dana, by_bob)

    assert gw.v1("DELETE", f"/benchmarks/{by_bob}", token=dana).status_code == 204
    [entry] = removals(gw, by_bob)
    assert entry["actor"] == authenticate(gw.store, f"Bearer {dana}").user_id


def test_an_admin_of_another_workspace_is_no_admin_here(pg_gateway: Gateway) -> None:
    gw = pg_gateway
    gw.workspace("team-b")
    erin = gw.member("team-b", "erin@example.com", role="admin")
    gw.member("default", "erin@example.com")
    by_admin = gw.benchmark("admins-other", ["t1"])
    refused = gw.v1("DELETE", f"/benchmarks/{by_admin}", token=erin, workspace="default")
    assert refused.status_code == 403, refused.text
    assert removals(gw, by_admin) == []
