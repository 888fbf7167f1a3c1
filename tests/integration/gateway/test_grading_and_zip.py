"""Issue 38 over HTTP, on the real gateway with its object store: an attempt's grading (API and page) from
the artifacts the executor stores, attacker-written ones included; a run's artifacts as one zip; and the
Configuration tab's TOML, which must resubmit as is."""

from __future__ import annotations

import io
import json
import re
import tomllib
import zipfile
from html import unescape
from typing import Any

import pytest
from regatta_gateway.queries import artifact_zip
from regatta_shared.events import ArtifactRef

from .conftest import ADMIN_TOKEN, Gateway, _put_artifact, demo_config, record_progress

CTRF = json.dumps(
    {
        "results": {
            "tool": {"name": "pytest"},
            "tests": [
                {"name": "test_passes", "status": "passed", "duration": 4},
                {"name": "<img src=x onerror=alert(1)>", "status": "failed", "message": "<b>boom</b>"},
                {"name": "test_skipped", "status": "skipped"},
                {
                    "name": "test_also_fails",
                    "status": "failed",
                    "duration": 9,
                    "trace": "t.py:1\nAssertionError",
                },
            ],
        }
    }
).encode()
STDOUT = (
    b"\x1b[1m\x1b[31mFAILED\x1b[0m test_also_fails\n<script>alert(1)</script>\n== 2 failed, 1 passed ==\n"
)
BOMB = (
    b'<?xml version="1.0"?>\n<!DOCTYPE z [<!ENTITY a "aaaaaaaaaa">'
    + b"".join(b'<!ENTITY %s "%s">' % (bytes([c + 1]), b"&%s;" % bytes([c]) * 10) for c in b"abcdefg")
    + b']>\n<testsuite><testcase name="&h;"/></testsuite>'
)


def one_agent_run(gateway: Gateway, name: str, tasks: list[str], **progress: Any) -> str:
    gateway.benchmark(name, tasks)
    config = demo_config(name)
    config["agents"] = config["agents"][:1]
    run_id = gateway.submit(config)["id"]
    gateway.progress(run_id, **progress)
    return run_id


def first_attempt(gateway: Gateway, run_id: str) -> str:
    return gateway.ok(gateway.v1("GET", f"/runs/{run_id}/attempts"))["attempts"][0]["attempt_id"]


def page_text(gateway: Gateway, path: str) -> tuple[str, str]:
    gateway.client.cookies.set("regatta_token", ADMIN_TOKEN)
    try:
        response = gateway.client.get(path)
    finally:
        gateway.client.cookies.clear()
    assert response.status_code == 200, response.text
    html = response.text
    return html, " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def test_grading_shows_each_reward_once_failed_tests_first_and_the_output_as_text(gateway: Gateway) -> None:
    artifacts = {
        "verifier/ctrf.json": CTRF,
        "verifier/test-stdout.txt": STDOUT,
        "verifier/reward.json": b'{"correctness": 1, "style": 0.5}',
    }
    run_id = one_agent_run(
        gateway, "graded", ["t1"], artifacts=artifacts, rewards={"correctness": 1.0, "style": 0.5}
    )
    aid = first_attempt(gateway, run_id)
    body = gateway.ok(gateway.v1("GET", f"/runs/{run_id}/attempts/{aid}/grading"))
    assert body["rewards"]["rows"] == [
        {"key": "correctness", "value": 1.0, "primary": False},
        {"key": "style", "value": 0.5, "primary": False},
    ]
    assert body["rewards"]["primary_is_mean"] is True
    report = body["report"]
    assert (report["path"], report["format"], report["total"], report["error"]) == (
        "verifier/ctrf.json",
        "ctrf",
        4,
        None,
    )
    assert report["counts"] == {"failed": 2, "other": 0, "pending": 0, "skipped": 1, "passed": 1}
    assert [t["status"] for t in report["tests"]] == ["failed", "failed", "skipped", "passed"]
    assert report["tests"][0]["name"] == "<img src=x onerror=alert(1)>"
    assert (
        body["output"]["text"]
        == "FAILED test_also_fails\n<script>alert(1)</script>\n== 2 failed, 1 passed ==\n"
    )
    assert gateway.v1("GET", f"/runs/{run_id}/attempts/att_nope/grading").status_code == 404

    html, text = page_text(gateway, f"/benchmarks/runs/{run_id}/attempts/{aid}")
    # The attacker's markup is text on the page, never a tag; no escape sequence reaches it.
    assert "<img src=x" not in html and "<script>alert(1)" not in html and "<b>boom" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html and "\x1b" not in html
    assert html.count('data-testid="reward-key"') == 2 and "reward · " not in text
    for words in (
        "Rewards correctness 1 style 0.5",
        "is the mean of these keys",
        "2 failed 1 skipped 1 passed of 4 tests",
        "failed <img src=x onerror=alert(1)> <b>boom</b>",
        "== 2 failed, 1 passed ==",
    ):
        assert words in text, (words, text)
    assert text.index("test_also_fails") < text.index("test_skipped") < text.index("test_passes")


def test_a_junit_xml_bomb_and_a_ctrf_of_a_million_tests_are_refused_with_a_reason(gateway: Gateway) -> None:
    bomb_run = one_agent_run(gateway, "bomb", ["t1"], artifacts={"verifier/junit.xml": BOMB})
    body = gateway.ok(
        gateway.v1("GET", f"/runs/{bomb_run}/attempts/{first_attempt(gateway, bomb_run)}/grading")
    )
    assert body["report"]["error"] == (
        "verifier/junit.xml could not be read: the report declares a DTD or entities, which are not read"
    )
    assert "tests" not in body["report"]

    million = b'{"results":{"tests":[' + b",".join([b'{"name":"<i>t</i>","status":"passed"}'] * 1_000_000)
    million += b"]}}"
    big_run = one_agent_run(gateway, "million", ["t1"], artifacts={"verifier/ctrf.json": million})
    aid = first_attempt(gateway, big_run)
    body = gateway.ok(gateway.v1("GET", f"/runs/{big_run}/attempts/{aid}/grading"))
    assert body["report"]["error"].startswith(f"verifier/ctrf.json is {len(million):,} bytes, more than the")
    html, text = page_text(gateway, f"/benchmarks/runs/{big_run}/attempts/{aid}")
    assert "download it" in text and "<i>t</i>" not in html


def _zip(gateway: Gateway, run_id: str, **kwargs: Any) -> Any:
    return gateway.v1("GET", f"/runs/{run_id}/artifacts.zip", **kwargs)


def test_the_artifacts_zip_holds_the_manifests_files_under_safe_names_and_is_bounded(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    gateway.benchmark("zipped", ["t1", "t2"])
    config = demo_config("zipped")
    config["agents"] = config["agents"][:1]
    config["name"] = "zip run"
    run_id = gateway.submit(config)["id"]
    files = {"agent/oracle.txt": b"done\n", "verifier/reward.txt": b"1\n", "verifier/test-stdout.txt": STDOUT}
    refs = [
        ArtifactRef(path=p, digest=_put_artifact(gateway.nats_url, b), size=len(b)) for p, b in files.items()
    ]
    # Paths as a forged report could name them, and an object the store no longer has.
    hostile = b"planted"
    refs += [
        ArtifactRef(path="../../../etc/escape.txt", digest=_put_artifact(gateway.nats_url, hostile), size=7),
        ArtifactRef(
            path="agent/\x1b[31mred\\name:.txt", digest=_put_artifact(gateway.nats_url, hostile), size=7
        ),
        ArtifactRef(path="agent/gone.txt", digest="sha256:" + "0" * 64, size=3),
    ]
    record_progress(gateway.store, run_id, refs=refs)
    gateway.settle()

    response = _zip(gateway, run_id)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/zip"
    assert response.headers["content-disposition"].startswith('attachment; filename="zip run-artifacts.zip"')
    archive = zipfile.ZipFile(io.BytesIO(response.content))
    assert archive.testzip() is None
    names = archive.namelist()
    for task in ("t1", "t2"):
        folder = f"artifacts/{task}/agent-1-attempt-1"
        for path, data in files.items():
            assert archive.read(f"{folder}/{path}") == data
        assert archive.read(f"{folder}/_/_/_/etc/escape.txt") == hostile
        assert archive.read(f"{folder}/agent/_[31mred_name_.txt") == hostile
    assert all(not n.startswith("/") and ".." not in n.split("/") and "\\" not in n for n in names)
    assert not any(re.search(r"[\x00-\x1f]", n) for n in names)
    assert archive.read("MISSING.txt").decode().count("agent/gone.txt") == 2
    manifest = gateway.ok(gateway.v1("GET", f"/runs/{run_id}/downloads", params={"types": "artifacts"}))
    stored = {
        artifact_zip.zip_name(f["path"]) for f in manifest["files"] if not f["path"].endswith("gone.txt")
    }
    assert set(names) == stored | {"MISSING.txt"}

    # Past its bounds the zip is refused before a byte of it is sent.
    monkeypatch.setattr(artifact_zip, "MAX_ZIP_BYTES", 20)
    refused = _zip(gateway, run_id)
    assert refused.status_code == 413 and refused.json()["code"] == "PAYLOAD_TOO_LARGE", refused.text
    monkeypatch.undo()
    # Only the run's own workspace may read it.
    gateway.workspace("other")
    assert _zip(gateway, run_id, workspace="other").status_code == 404


def test_the_configuration_toml_resubmits_as_is_and_runs_the_same_configuration(gateway: Gateway) -> None:
    gateway.benchmark("again", ["t1", "t2", "t3"])
    for name in ("PROVIDER_KEY", "EXTRA_SECRET", "VERIFIER_TOKEN"):
        gateway.ok(
            gateway.v1("POST", "/secrets", json={"name": name, "value": "v", "scope": "workspace"}), 201
        )
    original = gateway.ok(
        gateway.v1(
            "POST",
            "/runs",
            content=RICH_TOML.encode(),
            headers={"Content-Type": "application/toml"},
        ),
        201,
    )
    detail = gateway.ok(gateway.v1("GET", f"/runs/{original['id']}"))
    shown = detail["configuration"]["toml"]
    # Derived facts are comments; what is left is exactly a submission.
    assert f'# benchmark_id = "{detail["configuration"]["benchmark_id"]}"' in shown
    assert '# resolved_version = "1.0"' in shown and "# task_count = 2" in shown
    parsed = tomllib.loads(shown)
    assert set(parsed["experiment"]) == {"benchmark"} and "task_count" not in parsed["tasks"]

    again = gateway.ok(
        gateway.v1("POST", "/runs", content=shown.encode(), headers={"Content-Type": "application/toml"}), 201
    )
    assert again["id"] != original["id"] and again["task_count"] == 2
    before, after = (_submission(gateway, run) for run in (original["id"], again["id"]))
    for key in ("benchmark_id", "selection", "tasks", "agents", "execution", "env", "secret_names"):
        assert after[key] == before[key], key
    assert before["execution"]["verifier_integrity"] == "enforce"
    assert before["env"] == {"QUOTED": 'say "hi"\nbye', "EMPTY": ""}
    # The new run's own TOML is the same text: resubmitting is a fixed point.
    assert gateway.ok(gateway.v1("GET", f"/runs/{again['id']}"))["configuration"]["toml"] == shown


RICH_TOML = """
[experiment]
benchmark = "again"

[tasks]
task_names = ["t1", "t3"]

[[agents]]
harness = "oracle"
[agents.model]
type = "provider"
model = "openai/gpt-4o-mini"
api_key_secret = "PROVIDER_KEY"
[agents.env]
AGENT_FLAG = "1"

[[agents]]
harness = "nop"
[agents.model]
type = "endpoint"
base_url = "https://llm.example.com/v1"
model = "my-model"
api_key_secret = "PROVIDER_KEY"
[agents.model.extra_headers]
"X-Team \\"a\\"" = "blue"

[execution]
attempts_per_task = 2
max_concurrent_attempts = 3
timeout_multiplier = 1.5
max_retries = 1
pass_threshold = 0.5
cost_cap_usd = 10.0
verifier_integrity = "enforce"

[verifier]
required = ["VERIFIER_TOKEN"]

[secrets]
required = ["EXTRA_SECRET"]

[env]
QUOTED = "say \\"hi\\"\\nbye"
EMPTY = ""
"""


def _submission(gateway: Gateway, run_id: str) -> dict[str, Any]:
    (row,) = [r for r in gateway.raw_rows("rm_runs") if r["id"] == run_id]
    submission = row["submission"]
    return submission if isinstance(submission, dict) else json.loads(submission)
