"""Per-test results from a verifier's report: CTRF (`ctrf.json`, https://ctrf.io) or JUnit XML.

Every report is written inside the attempt's sandbox, so by the agent as much as by the tests: it is read
as hostile input. The caller bounds its size before it is read (MAX_REPORT_BYTES); JUnit XML is parsed by
defusedxml with DTDs refused, so no entity is ever expanded (a "billion laughs" is an error, not a
gigabyte) and nothing external is fetched; every text is cut and its invisible characters spelled out;
however many tests a report holds, at most MAX_LISTED are kept (failed ones first) and the rest counted.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import asdict, dataclass, field
from typing import Any
from xml.etree.ElementTree import Element, ParseError

import defusedxml.ElementTree as SafeXML
from defusedxml import DefusedXmlException

MAX_REPORT_BYTES = 4 * 1024 * 1024
MAX_LISTED = 500
MAX_NAME = 500
MAX_MESSAGE = 2_000
MAX_TRACE = 8_000
# Shown in this order: what needs a look first. CTRF's statuses; anything else counts as `other`.
ORDER = ("failed", "other", "pending", "skipped", "passed")
# Characters that hide or reorder text around them (bidi overrides, zero-width, controls).
_HIDDEN = {"Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp"}
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")


class ReportError(ValueError):
    """A report that cannot be read; the message says why, for the page."""


@dataclass
class CaseResult:
    name: str
    status: str
    duration_ms: float | None = None
    message: str = ""
    trace: str = ""
    suite: str = ""


@dataclass
class VerifierReport:
    format: str
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ORDER, 0))
    tests: list[CaseResult] = field(default_factory=list)
    _kept: dict[str, list[CaseResult]] = field(default_factory=lambda: {s: [] for s in ORDER})

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def add(self, test: CaseResult) -> None:
        self.counts[test.status] += 1
        kept = self._kept[test.status]
        if len(kept) < MAX_LISTED:
            kept.append(test)

    def done(self) -> VerifierReport:
        """The listed tests: failed first, then other, pending, skipped, passed; in report order within
        a status; at most MAX_LISTED in all."""
        self.tests = [t for status in ORDER for t in self._kept[status]][:MAX_LISTED]
        self._kept = {s: [] for s in ORDER}
        return self

    def as_dict(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "total": self.total,
            "counts": dict(self.counts),
            "listed": len(self.tests),
            "tests": [asdict(t) for t in self.tests],
        }


def clean(text: Any, limit: int, *, lines: bool = False) -> str:
    """`text` as safe to show: ANSI escapes dropped, invisible characters written out as `\\u202e` (line
    breaks and tabs kept when `lines`), cut to `limit` characters saying how many more there were."""
    if text is None:
        return ""
    raw = text if isinstance(text, str) else str(text)
    scanned = raw[: limit * 2]  # escapes and dropped characters shrink it; never scan more than this
    text = _ANSI.sub("", scanned).replace("\r\n", "\n").replace("\r", "\n")
    kept = "\n\t" if lines else ""
    out = "".join(
        c if c in kept or unicodedata.category(c) not in _HIDDEN else f"\\u{ord(c):04x}" for c in text
    )
    if len(out) > limit or len(raw) > len(scanned):
        return f"{out[:limit]}… ({max(len(raw) - limit, 1)} more characters)"
    return out


def _status(value: Any) -> str:
    status = str(value).strip().lower() if isinstance(value, str) else ""
    return status if status in ORDER else "other"


def _duration(value: Any, scale: float = 1.0) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        number = float(value) * scale
    except ValueError:
        return None
    return number if 0 <= number < 1e12 else None  # NaN and infinities fail both comparisons


def parse_ctrf(data: bytes) -> VerifierReport:
    """A CTRF report: `results.tests[]`, each with `name`, `status`, `duration` (ms), `message`, `trace`."""
    if len(data) > MAX_REPORT_BYTES:
        raise ReportError(f"the report is larger than {MAX_REPORT_BYTES // (1024 * 1024)} MiB")
    try:
        document = json.loads(data)
    except (ValueError, RecursionError):
        raise ReportError("the report is not valid JSON") from None
    tests = (document.get("results") or {}).get("tests") if isinstance(document, dict) else None
    if not isinstance(tests, list):
        raise ReportError("the report has no results.tests list")
    report = VerifierReport("ctrf")
    for entry in tests:
        if not isinstance(entry, dict):
            continue
        report.add(
            CaseResult(
                name=clean(entry.get("name"), MAX_NAME) or "(unnamed)",
                status=_status(entry.get("status")),
                duration_ms=_duration(entry.get("duration")),
                message=clean(entry.get("message"), MAX_MESSAGE, lines=True),
                trace=clean(entry.get("trace"), MAX_TRACE, lines=True),
                suite=clean(entry.get("suite"), MAX_NAME),
            )
        )
    return report.done()


def parse_junit(data: bytes) -> VerifierReport:
    """A JUnit XML report: every `testcase`; a `failure` or `error` child fails it, `skipped` skips it."""
    if len(data) > MAX_REPORT_BYTES:
        raise ReportError(f"the report is larger than {MAX_REPORT_BYTES // (1024 * 1024)} MiB")
    try:
        root = SafeXML.fromstring(data, forbid_dtd=True)
    except DefusedXmlException:
        raise ReportError("the report declares a DTD or entities, which are not read") from None
    except (ParseError, ValueError, RecursionError):
        raise ReportError("the report is not well-formed XML") from None
    report = VerifierReport("junit")
    for case in root.iter("testcase"):
        report.add(_junit_case(case))
    return report.done()


def _junit_case(case: Element) -> CaseResult:
    status, message, trace = "passed", "", ""
    for child in case:
        if child.tag in ("failure", "error"):
            status = "failed"
            message = clean(child.get("message") or child.get("type"), MAX_MESSAGE, lines=True)
            trace = clean(child.text, MAX_TRACE, lines=True)
            break
        if child.tag == "skipped":
            status = "skipped"
            message = clean(child.get("message"), MAX_MESSAGE, lines=True)
    return CaseResult(
        name=clean(case.get("name"), MAX_NAME) or "(unnamed)",
        status=status,
        duration_ms=_duration(case.get("time"), 1000.0),  # JUnit times are seconds
        message=message,
        trace=trace,
        suite=clean(case.get("classname"), MAX_NAME),
    )
