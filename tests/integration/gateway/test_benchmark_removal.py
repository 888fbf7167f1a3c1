"""Who removes a benchmark (issue 37): the member who added it or a workspace admin, nobody else. A refused
removal records nothing; the audit log names who removed what; the benchmark page offers Remove exactly
to those whose removal would be recorded. Who may remove is a rule of `commands/benchmarks.py`, tested on
the service layer; the page (a rendered web page) and the route's 204 stay on HTTP."""

from __future__ import annotations

from regatta_gateway.commands.benchmarks import remove_benchmark
from regatta_gateway.errors import Forbidden, NotFound
from regatta_gateway.queries.audit import list_audit
from regatta_gateway.queries.benchmarks import benchmark_detail

from .conftest import ADMIN_TOKEN, Gateway
from .service_support import Services, refused


def page_offers_remove(gw: Gateway, token: str, benchmark_id: str) -> bool:
    gw.client.cookies.set("regatta_token", token)
    response = gw.client.get(f"/benchmarks/{benchmark_id}", follow_redirects=False)
    assert response.status_code == 200, response.text
    return 'data-action="remove"' in response.text


def removals(sv: Services, benchmark_id: str) -> list[dict[str, object]]:
    """The workspace's audit entries for this benchmark's removal (GET /api/v1/audit?kind=...)."""
    entries = list_audit(sv.store, sv.scope(), kind="BenchmarkRemoved")["entries"]
    return [e for e in entries if f"benchmark_id={benchmark_id}" in str(e["summary"])]


def remove(sv: Services, token: str, benchmark_id: str, workspace: str = "default") -> None:
    remove_benchmark(sv.store, sv.scope(token, workspace), benchmark_id)
    sv.settle()


def test_a_member_cannot_remove_a_benchmark_someone_else_added(pg_services: Services) -> None:
    sv = pg_services
    bob = sv.member("default", "bob@example.com")
    by_admin = sv.benchmark("admins-own", ["t1"])
    before = sv.event_count()

    refusal = refused(lambda: remove(sv, bob, by_admin), Forbidden, "FORBIDDEN")
    assert "Only the member who added benchmark" in refusal.message and "workspace admin" in refusal.message
    assert sv.event_count() == before
    assert benchmark_detail(sv.store, sv.scope(bob), by_admin)["benchmark"]["id"] == by_admin
    assert removals(sv, by_admin) == []


def test_the_adder_removes_their_own_benchmark_and_the_audit_log_says_so(pg_services: Services) -> None:
    sv = pg_services
    bob = sv.member("default", "bob@example.com")
    carol = sv.member("default", "carol@example.com")
    by_bob = sv.benchmark("bobs-own", ["t1"], token=bob)
    refused(lambda: remove(sv, carol, by_bob), Forbidden, "FORBIDDEN")

    remove(sv, bob, by_bob)
    refused(lambda: benchmark_detail(sv.store, sv.scope(bob), by_bob), NotFound)
    [entry] = removals(sv, by_bob)
    assert entry["actor"] == sv.user_id(bob)
    assert entry["actor_name"] != entry["actor"]  # resolved to bob's name, not left as an id


def test_a_workspace_admin_removes_a_members_benchmark(pg_services: Services) -> None:
    sv = pg_services
    bob = sv.member("default", "bob@example.com")
    dana = sv.member("default", "dana@example.com", role="admin")
    by_bob = sv.benchmark("bobs-other", ["t1"], token=bob)

    remove(sv, dana, by_bob)
    [entry] = removals(sv, by_bob)
    assert entry["actor"] == sv.user_id(dana)


def test_an_admin_of_another_workspace_is_no_admin_here(pg_services: Services) -> None:
    sv = pg_services
    sv.workspace("team-b")
    erin = sv.member("team-b", "erin@example.com", role="admin")
    sv.member("default", "erin@example.com")
    by_admin = sv.benchmark("admins-other", ["t1"])
    refused(lambda: remove(sv, erin, by_admin), Forbidden)
    assert removals(sv, by_admin) == []


def test_the_benchmark_page_offers_remove_exactly_to_those_who_may_remove(pg_gateway: Gateway) -> None:
    """The page's Remove button follows the same rule as the command: the adder and workspace admins."""
    gw = pg_gateway
    bob = gw.member("default", "bob@example.com")
    carol = gw.member("default", "carol@example.com")
    dana = gw.member("default", "dana@example.com", role="admin")
    by_admin = gw.benchmark("admins-own", ["t1"])
    by_bob = gw.benchmark("bobs-own", ["t1"], token=bob)
    assert not page_offers_remove(gw, bob, by_admin)
    assert page_offers_remove(gw, bob, by_bob)
    assert not page_offers_remove(gw, carol, by_bob)
    assert page_offers_remove(gw, ADMIN_TOKEN, by_bob) and page_offers_remove(gw, dana, by_bob)
    # The route's answers: 403 for a refusal, 204 (no body) for a removal.
    assert gw.v1("DELETE", f"/benchmarks/{by_bob}", token=carol).status_code == 403
    removed = gw.v1("DELETE", f"/benchmarks/{by_bob}", token=bob)
    assert removed.status_code == 204 and not removed.content
