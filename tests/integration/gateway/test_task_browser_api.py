"""Issue 38, the task browser's API: `GET /api/v1/benchmarks/{key}/tasks` (search, paging, resources,
validity) and `GET /api/v1/benchmarks/{key}/tasks/{name}` (metadata, the files of the task's archive read
as hostile input: bounded, no path out of the archive, binary named as such; solutions hidden from
members when the benchmark says so; results by agent).

The sync is seeded as registry-sync records it, the archives put in the real task object store by digest.
"""

from __future__ import annotations

import asyncio
import hashlib
from html.parser import HTMLParser
from typing import Any

import nats
from regatta_shared.events import (
    BenchmarkMetadata,
    BenchmarkSyncCompleted,
    BenchmarkSyncStarted,
    BenchmarkTasksSynced,
    InvalidTask,
    TaskInfo,
    TaskResources,
)
from regatta_shared.events.envelope import new_event
from regatta_shared.ids import benchmark_stream
from regatta_shared.messaging.bus import TASKS_BUCKET

from tests.support.task_archives import SOLUTION, archive, task_files

from .conftest import ADMIN_TOKEN, Gateway, demo_config

EXTRA = [f"extra-{i}" for i in range(5)]


def _put(nats_url: str, data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()

    async def put() -> None:
        nc = await nats.connect(nats_url)
        try:
            await (await nc.jetstream().object_store(TASKS_BUCKET)).put(digest, data)
        finally:
            await nc.close()

    asyncio.run(put())
    return digest


def seed(
    gw: Gateway, name: str, metadata: BenchmarkMetadata | None = None, files: dict[str, bytes] | None = None
) -> str:
    """A benchmark `name` of parser-fix (`files`, default task_files()), traversal (an archive naming a
    path out of the task), gone (no archive), broken (invalid) and five extra tasks."""
    body = {"source_type": "folder", "path": f"/srv/benchmarks/{name}", "name": name}
    benchmark_id = gw.ok(gw.v1("POST", "/benchmarks", json=body), 201)["id"]
    files = files or task_files()
    traversal = archive({"instruction.md": b"hi", "../../etc/escape.txt": b"out"})
    infos = [
        TaskInfo(
            name="parser-fix",
            category="parsing",
            difficulty="hard",
            digest=_put(gw.nats_url, archive(files)),
            resources=TaskResources(cpus=2, memory_mb=3072, storage_mb=4096, verifier_timeout_sec=60),
        ),
        TaskInfo(name="traversal", category="io", digest=_put(gw.nats_url, traversal)),
        TaskInfo(name="gone", category="io", digest="sha256:" + "0" * 64),
        *(TaskInfo(name=n, category="misc", digest=_put(gw.nats_url, archive(files))) for n in EXTRA),
    ]
    sync_id = f"sync_{benchmark_id}"
    events = [
        BenchmarkSyncStarted(benchmark_id=benchmark_id, sync_id=sync_id, total=len(infos) + 1),
        BenchmarkTasksSynced(
            benchmark_id=benchmark_id,
            sync_id=sync_id,
            page=1,
            tasks=infos,
            invalid=[InvalidTask(name="broken", reason="task 'broken': task.toml is missing")],
        ),
        BenchmarkSyncCompleted(
            benchmark_id=benchmark_id,
            sync_id=sync_id,
            version="1.0",
            digest="sha256:" + "1" * 64,
            task_count=len(infos),
            metadata=metadata or BenchmarkMetadata(),
        ),
    ]
    gw.store.append(benchmark_stream(benchmark_id), [new_event(e, actor="registry-sync") for e in events])
    gw.settle()
    return benchmark_id


def tasks(gw: Gateway, key: str, **params: Any) -> dict[str, Any]:
    return gw.ok(gw.v1("GET", f"/benchmarks/{key}/tasks", params=params))


def test_the_task_list_searches_pages_and_shows_resources_and_validity(gateway: Gateway) -> None:
    gw = gateway
    benchmark_id = seed(gw, "browse")
    gw.ok(
        gw.v1("POST", f"/benchmarks/{benchmark_id}/exclusions", json={"task": "gone", "reason": "no image"}),
        201,
    )
    gw.settle()

    body = tasks(gw, "browse")
    names = [x["name"] for x in body["tasks"]]
    assert sorted(names) == sorted(["parser-fix", "traversal", "gone", "broken", *EXTRA])
    assert (body["total_count"], body["has_more"], body["version"]) == (9, False, "1.0")
    by_name = {x["name"]: x for x in body["tasks"]}
    fix = by_name["parser-fix"]
    assert (fix["category"], fix["difficulty"], fix["validity"], fix["validity_reason"]) == (
        "parsing",
        "hard",
        "valid",
        None,
    )
    assert fix["resources"]["cpus"] == 2 and fix["resources"]["memory_mb"] == 3072
    assert fix["resources"]["storage_mb"] == 4096
    assert (by_name["gone"]["validity"], by_name["gone"]["validity_reason"]) == ("excluded", "no image")
    assert by_name["broken"]["validity"] == "invalid"
    assert "task.toml is missing" in by_name["broken"]["validity_reason"]

    # Search matches the name or the category, in any case; `_` and `%` are literal.
    assert [x["name"] for x in tasks(gw, "browse", search="PARSER")["tasks"]] == ["parser-fix"]
    assert sorted(x["name"] for x in tasks(gw, "browse", search="io")["tasks"]) == ["gone", "traversal"]
    assert tasks(gw, "browse", search="%")["total_count"] == 0
    assert tasks(gw, "browse", search="extra_")["total_count"] == 0

    # Paged: the same order, four at a time.
    first = tasks(gw, "browse", search="extra", limit=3)
    second = tasks(gw, "browse", search="extra", limit=3, offset=3)
    assert (first["total_count"], first["has_more"], first["next_offset"], second["has_more"]) == (
        5,
        True,
        3,
        False,
    )
    assert [x["name"] for x in first["tasks"] + second["tasks"]] == EXTRA

    bad = gw.v1("GET", "/benchmarks/browse/tasks", params={"search": "a\x00b"})
    assert bad.status_code == 400 and bad.json()["field"] == "search"
    assert gw.v1("GET", "/benchmarks/nope/tasks").status_code == 404


def test_a_task_shows_its_files_bounded_and_its_results_by_agent(gateway: Gateway) -> None:
    gw = gateway
    seed(gw, "browse")
    run_id = gw.submit(demo_config("browse"))["id"]
    gw.progress(run_id)  # oracle passes every task, nop fails

    body = gw.ok(gw.v1("GET", "/benchmarks/browse/tasks/parser-fix"))
    assert body["task"]["name"] == "parser-fix" and body["task"]["validity"] == "valid"
    assert body["files_error"] is None and body["solutions_hidden"] is False
    files = {f["path"]: f for f in body["files"]}
    sent = task_files()
    assert sorted(files) == sorted(sent)
    # The instruction as written (rendering and sanitising is the page's): the API returns text.
    assert body["instruction"] == sent["instruction.md"].decode()
    assert files["instruction.md"]["section"] == "instruction" and files["task.toml"]["section"] == "config"
    assert files["environment/Dockerfile"]["section"] == "environment"
    assert files["tests/test.sh"]["section"] == "tests"
    assert files["solution/solve.sh"]["content"] == SOLUTION
    # Binary: named with its size, no content.
    binary = files["environment/data.bin"]
    assert (binary["kind"], binary["size"], binary["content"]) == ("binary", 1024, None)
    # Past 256 KiB: cut there, marked, its full size given.
    big = files["environment/big.txt"]
    assert big["truncated"] is True and big["size"] == len(sent["environment/big.txt"])
    assert len(big["content"].encode()) == 256 * 1024
    assert sent["environment/big.txt"].decode().startswith(big["content"])

    results = {r["agent"]: r for r in body["results_by_agent"]}
    assert sorted(results) == ["nop", "oracle"]
    assert (
        results["oracle"]["attempts"],
        results["oracle"]["pass_rate"],
        results["oracle"]["mean_reward"],
    ) == (
        1,
        1.0,
        1.0,
    )
    assert (results["nop"]["passed"], results["nop"]["pass_rate"], results["nop"]["mean_reward"]) == (
        0,
        0.0,
        0.0,
    )
    assert results["nop"]["participant"] == "nop|" and results["oracle"]["last_run_at"]

    # An archive naming a path out of the task shows no file, and says why; so does a missing archive.
    escaped = gw.ok(gw.v1("GET", "/benchmarks/browse/tasks/traversal"))
    assert escaped["files"] == [] and "escape.txt" in escaped["files_error"]
    gone = gw.ok(gw.v1("GET", "/benchmarks/browse/tasks/gone"))
    assert gone["files"] == [] and "not in the task store" in gone["files_error"]

    # An unknown task is a 404 naming it; a bad name a 400.
    unknown = gw.v1("GET", "/benchmarks/browse/tasks/no-such-task")
    assert unknown.status_code == 404 and "no-such-task" in unknown.json()["message"]
    assert unknown.json()["field"] == "name"
    control = gw.v1("GET", "/benchmarks/browse/tasks/a%1bb")
    # (a control character in a path is refused before any route, naming the path)
    assert control.status_code == 400 and control.json()["field"] == "path"
    assert gw.v1("GET", "/benchmarks/browse/tasks/" + "x" * 600).status_code == 400


def test_a_benchmark_that_hides_solutions_hides_them_from_members(gateway: Gateway) -> None:
    gw = gateway
    seed(gw, "sealed", BenchmarkMetadata(show_solutions=False))
    member = gw.member("default", "reader@example.com")

    seen = gw.ok(gw.v1("GET", "/benchmarks/sealed/tasks/parser-fix", token=member))
    assert seen["solutions_hidden"] is True
    assert not [f for f in seen["files"] if f["path"].startswith("solution/")]
    assert "the-secret-solution" not in str(seen)
    assert any(f["path"] == "tests/test.sh" for f in seen["files"])
    # An admin of the workspace still sees it.
    admin = gw.ok(gw.v1("GET", "/benchmarks/sealed/tasks/parser-fix"))
    assert admin["solutions_hidden"] is False
    assert any(f["content"] == SOLUTION for f in admin["files"])


def _tags(html: str) -> list[tuple[str, list[tuple[str, str | None]]]]:
    """Every element of `html` with its attributes, as a browser's parser reads them."""
    found: list[tuple[str, list[tuple[str, str | None]]]] = []

    class Collect(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            found.append((tag, attrs))

    Collect().feed(html)
    return found


def _page(gw: Gateway, path: str, token: str = ADMIN_TOKEN, **params: Any) -> Any:
    gw.client.cookies.clear()
    return gw.client.get(path, params=params, cookies={"regatta_token": token}, follow_redirects=False)


def test_the_pages_list_tasks_and_render_a_task_sanitised(gateway: Gateway) -> None:
    gw = gateway
    benchmark_id = seed(gw, "sealed", BenchmarkMetadata(show_solutions=False))
    member = gw.member("default", "reader@example.com")

    listed = _page(gw, f"/benchmarks/{benchmark_id}", task_search="extra", task_page="2")
    assert listed.status_code == 200, listed.text
    # Five matches, fifty a page: page 2 is empty, and says the search matched nothing there.
    assert 'data-testid="task-table"' in listed.text and "<tr data-task=" not in listed.text
    first = _page(gw, f"/benchmarks/{benchmark_id}", task_search="extra")
    assert first.text.count("<tr data-task=") == 5 and "Tasks (5)" in first.text

    shown = _page(gw, f"/benchmarks/{benchmark_id}/task", token=member, name="parser-fix")
    assert shown.status_code == 200, shown.text
    html = shown.text
    instruction = html.split('data-testid="instruction">')[1].split("</div>")[0]
    assert "<h1>Fix the parser</h1>" in instruction and "<strong>empty</strong>" in instruction
    assert '<a href="https://example.com/docs"' in instruction
    tags = _tags(instruction)
    assert {name for name, _ in tags} <= {"h1", "p", "strong", "code", "a"}, tags
    assert all(not key.startswith("on") for _, attrs in tags for key, _ in attrs), tags
    assert [value for name, attrs in tags if name == "a" for key, value in attrs if key == "href"] == [
        "https://example.com/docs"
    ]
    assert "&lt;script&gt;" in instruction  # shown as the text it is
    # Files escaped as text; the solution hidden from a member; the binary and the cut file named.
    assert "FROM regatta-test-base:bookworm" in html and 'data-path="tests/test.sh"' in html
    assert 'data-testid="solution-hidden"' in html and "the-secret-solution" not in html
    assert "binary, 1024 bytes" in html and 'data-testid="truncated"' in html
    assert 'data-testid="results-by-agent"' in html
    # An admin sees the solution.
    admin = _page(gw, f"/benchmarks/{benchmark_id}/task", name="parser-fix")
    assert "the-secret-solution" in admin.text and 'data-testid="solution-hidden"' not in admin.text
    # The traversal archive: no file, the reason shown.
    escaped = _page(gw, f"/benchmarks/{benchmark_id}/task", name="traversal")
    assert escaped.status_code == 200 and 'data-testid="files-error"' in escaped.text
    assert _page(gw, f"/benchmarks/{benchmark_id}/task", name="no-such-task").status_code == 404


def test_a_task_dropped_by_a_later_version_keeps_its_history_page(gateway: Gateway) -> None:
    gw = gateway
    benchmark_id = seed(gw, "moving")
    run_id = gw.submit(demo_config("moving"))["id"]
    gw.progress(run_id)
    # Version 2.0 no longer has parser-fix.
    sync_id = f"sync2_{benchmark_id}"
    kept = [TaskInfo(name="traversal", digest="sha256:" + "2" * 64)]
    events = [
        BenchmarkSyncStarted(benchmark_id=benchmark_id, sync_id=sync_id, total=1),
        BenchmarkTasksSynced(benchmark_id=benchmark_id, sync_id=sync_id, page=1, tasks=kept),
        BenchmarkSyncCompleted(
            benchmark_id=benchmark_id,
            sync_id=sync_id,
            version="2.0",
            digest="sha256:" + "3" * 64,
            task_count=1,
        ),
    ]
    gw.store.append(benchmark_stream(benchmark_id), [new_event(e, actor="registry-sync") for e in events])
    gw.settle()

    assert [x["name"] for x in tasks(gw, "moving")["tasks"]] == ["traversal"]
    gone = gw.v1("GET", "/benchmarks/moving/tasks/parser-fix")
    assert gone.status_code == 404 and gone.json()["field"] == "name"
    shown = _page(gw, f"/benchmarks/{benchmark_id}/task", name="parser-fix")
    assert shown.status_code == 200, shown.text
    assert 'data-testid="task-not-current"' in shown.text and 'data-testid="instruction"' not in shown.text
    assert shown.text.count("<tr data-attempt-id=") == 2  # oracle's and nop's attempt of version 1.0
