"""Issue 38, the pure parts of readable grading: per-test results from CTRF and JUnit reports (failed first,
counted, bounded), hostile reports (an XML bomb, external entities, a million tests, markup and escape
sequences in names), the verifier's output as text, every reward key once, safe zip entry names."""

from __future__ import annotations

import json
import time

import pytest
from regatta_gateway.queries.artifact_zip import zip_name
from regatta_gateway.queries.grading import output_view, reward_rows
from regatta_gateway.queries.verifier_reports import (
    MAX_LISTED,
    MAX_NAME,
    MAX_REPORT_BYTES,
    ReportError,
    clean,
    parse_ctrf,
    parse_junit,
)


def ctrf(*tests: dict) -> bytes:
    return json.dumps({"results": {"tool": {"name": "pytest"}, "tests": list(tests)}}).encode()


def test_ctrf_lists_failed_tests_first_with_counts_and_their_messages() -> None:
    report = parse_ctrf(
        ctrf(
            {"name": "test_a", "status": "passed", "duration": 12},
            {
                "name": "test_b",
                "status": "failed",
                "duration": 3.5,
                "message": "assert 1 == 2",
                "trace": "x.py:3",
            },
            {"name": "test_c", "status": "skipped"},
            {"name": "test_d", "status": "weird"},
            {"name": "test_e", "status": "failed"},
        )
    ).as_dict()
    assert [t["name"] for t in report["tests"]] == ["test_b", "test_e", "test_d", "test_c", "test_a"]
    assert report["counts"] == {"failed": 2, "other": 1, "pending": 0, "skipped": 1, "passed": 1}
    assert report["total"] == 5 and report["listed"] == 5
    first = report["tests"][0]
    assert (first["status"], first["duration_ms"], first["message"], first["trace"]) == (
        "failed",
        3.5,
        "assert 1 == 2",
        "x.py:3",
    )


def test_ctrf_with_a_million_tests_is_counted_but_only_its_first_failures_listed() -> None:
    # Compact, so that a million fit under the read bound: the bound on what is listed is the subject.
    body = b'{"results":{"tests":[' + b",".join([b'{"name":"p","status":"passed"}'] * 999_000)
    body += b"," + b",".join([b'{"name":"f","status":"failed"}'] * 1_000) + b"]}}"
    assert len(body) > MAX_REPORT_BYTES
    with pytest.raises(ReportError, match="larger than 4 MiB"):
        parse_ctrf(body)
    many = b'{"results":{"tests":[' + b",".join([b'{"name":"p","status":"passed"}'] * 100_000)
    many += b',{"name":"late failure","status":"failed"}]}}'
    started = time.monotonic()
    report = parse_ctrf(many).as_dict()
    assert time.monotonic() - started < 10
    assert report["total"] == 100_001 and report["counts"]["failed"] == 1
    assert report["listed"] == MAX_LISTED and report["tests"][0]["name"] == "late failure"


def test_ctrf_names_are_text_cut_and_without_escape_sequences_or_hidden_characters() -> None:
    name = "<img src=x onerror=alert(1)>\x1b[31mred\x1b[0m\u202eevil" + "n" * 5_000
    (test,) = parse_ctrf(ctrf({"name": name, "status": "failed", "message": 7})).tests
    # Markup stays as written (the templates escape it); the escape sequence is gone, the override shown.
    assert test.name.startswith("<img src=x onerror=alert(1)>red\\u202eevil")
    assert "\x1b" not in test.name and "\u202e" not in test.name
    assert len(test.name) < MAX_NAME + 40 and test.name.endswith("more characters)")
    assert test.message == "7"


@pytest.mark.parametrize(
    "body",
    [b"not json", b"[1, 2]", b'{"results": {"tests": 3}}', b"[" * 100_000 + b"]" * 100_000],
)
def test_a_ctrf_report_that_is_not_one_is_an_error_with_a_reason(body: bytes) -> None:
    with pytest.raises(ReportError):
        parse_ctrf(body)


JUNIT = b"""<?xml version="1.0"?>
<testsuites><testsuite name="s">
  <testcase classname="tests.test_x" name="test_ok" time="0.25"/>
  <testcase classname="tests.test_x" name="test_bad" time="1.5">
    <failure message="boom">Traceback: &lt;b&gt;</failure></testcase>
  <testcase classname="tests.test_x" name="test_err"><error type="OSError"/></testcase>
  <testcase classname="tests.test_x" name="test_skip"><skipped message="later"/></testcase>
</testsuite></testsuites>"""


def test_junit_failures_and_errors_fail_skipped_skip_and_times_become_milliseconds() -> None:
    report = parse_junit(JUNIT).as_dict()
    assert [(t["name"], t["status"]) for t in report["tests"]] == [
        ("test_bad", "failed"),
        ("test_err", "failed"),
        ("test_skip", "skipped"),
        ("test_ok", "passed"),
    ]
    bad = report["tests"][0]
    assert (bad["message"], bad["trace"], bad["duration_ms"], bad["suite"]) == (
        "boom",
        "Traceback: <b>",
        1500.0,
        "tests.test_x",
    )
    assert report["tests"][1]["message"] == "OSError"


BOMB = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
<!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">
<!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
<!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
<!ENTITY lol5 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
<!ENTITY lol6 "&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;">
<!ENTITY lol7 "&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;">
<!ENTITY lol8 "&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;">
<!ENTITY lol9 "&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;">]>
<testsuite><testcase name="&lol9;"/></testsuite>"""
EXTERNAL = b"""<?xml version="1.0"?>
<!DOCTYPE t [<!ENTITY x SYSTEM "file:///etc/passwd">]><testsuite><testcase name="&x;"/></testsuite>"""


@pytest.mark.parametrize("body", [BOMB, EXTERNAL], ids=["billion-laughs", "external-entity"])
def test_junit_with_entities_is_refused_without_expanding_or_fetching_them(body: bytes) -> None:
    started = time.monotonic()
    with pytest.raises(ReportError, match="DTD or entities"):
        parse_junit(body)
    assert time.monotonic() - started < 2


@pytest.mark.parametrize("body", [b"<testsuite><testcase", b"", b"\xff\xfe<a/>"])
def test_junit_that_is_not_xml_is_an_error(body: bytes) -> None:
    with pytest.raises(ReportError):
        parse_junit(body)


def test_junit_larger_than_the_bound_is_not_parsed() -> None:
    with pytest.raises(ReportError, match="larger than"):
        parse_junit(b"<testsuite>" + b" " * MAX_REPORT_BYTES + b"</testsuite>")


def test_output_is_text_without_escape_sequences_and_its_tail_when_long() -> None:
    shown = output_view(b"\x1b[32mPASSED\x1b[0m test_a\r\n\x1b]0;title\x07<script>x</script>\x00\n")
    assert shown == {
        "text": "PASSED test_a\n<script>x</script>\\u0000\n",
        "truncated": False,
        "shown_bytes": 54,
    }
    long = b"".join(b"line %d\n" % i for i in range(100_000)) + b"=== 3 failed, 97 passed ===\n"
    tail = output_view(long)
    assert tail["truncated"] and tail["text"].endswith("=== 3 failed, 97 passed ===\n")
    assert tail["text"].startswith("line ") and len(tail["text"]) <= 256 * 1024
    assert "\ufffd" in output_view(b"bad \xff byte")["text"]


def test_every_reward_key_is_shown_once_and_the_primary_one_is_marked() -> None:
    assert reward_rows({"reward": 1.0}, 1.0, None)["rows"] == [
        {"key": "reward", "value": 1.0, "primary": True}
    ]
    several = reward_rows({"correctness": 1.0, "performance": 0.5}, 0.75, None)
    assert [(r["key"], r["primary"]) for r in several["rows"]] == [
        ("correctness", False),
        ("performance", False),
    ]
    assert several["primary_is_mean"] is True
    named = reward_rows({"correctness": 1.0, "performance": 0.5}, 0.5, "performance")
    assert [(r["key"], r["primary"]) for r in named["rows"]] == [
        ("performance", True),
        ("correctness", False),
    ]
    assert not named["primary_is_mean"]
    assert reward_rows(None, None, None)["rows"] == []
    assert reward_rows({}, 0.0, None)["rows"] == [{"key": "reward", "value": 0.0, "primary": True}]


def test_clean_keeps_lines_only_when_asked() -> None:
    assert clean("a\nb\tc", 100) == "a\\u000ab\\u0009c"
    assert clean("a\nb\tc", 100, lines=True) == "a\nb\tc"


@pytest.mark.parametrize(
    ("path", "name"),
    [
        (
            "artifacts/t/agent-1-attempt-1/verifier/ctrf.json",
            "artifacts/t/agent-1-attempt-1/verifier/ctrf.json",
        ),
        ("artifacts/../../etc/passwd", "artifacts/_/_/etc/passwd"),
        ("/abs/x", "_/abs/x"),
        ("artifacts/C:\\win\\x\n.txt", "artifacts/C__win_x_.txt"),
        ("artifacts//.", "artifacts/_/_"),
    ],
)
def test_zip_entry_names_are_relative_and_plain(path: str, name: str) -> None:
    assert zip_name(path) == name
