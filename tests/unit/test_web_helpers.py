"""The web UI's pure parts: charts, number formatting, the sign-in redirect rule and the cookie middleware."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

import pytest
from jinja2 import Environment
from regatta_gateway.web import charts
from regatta_gateway.web.benchmark_views import source_facts
from regatta_gateway.web.formatting import FILTERS
from regatta_gateway.web.integrity_views import integrity_view, visible
from regatta_gateway.web.session import CookieBearerMiddleware, safe_next
from regatta_shared.events.integrity import AttemptIntegrity, Explanation, ToolChainChange

SVG = "{http://www.w3.org/2000/svg}"


def _point(label: str, cost: float, value: float) -> charts.ScatterPoint:
    return charts.ScatterPoint(label, "#000000", cost, value, label)


def test_pareto_frontier_keeps_agents_nothing_beats_on_both_cost_and_pass_rate() -> None:
    points = [
        _point("cheap-bad", 0.01, 0.2),
        _point("mid", 0.10, 0.6),
        _point("dominated", 0.20, 0.5),
        _point("best", 0.40, 0.8),
        _point("same-cost-worse", 0.10, 0.55),
        _point("pricier-equal", 0.50, 0.8),
    ]
    assert [p.label for p in charts.pareto_frontier(points)] == ["cheap-bad", "mid", "best"]
    assert charts.pareto_frontier([]) == []


def test_charts_are_wellformed_svg_with_labelled_axes() -> None:
    curve = charts.pass_at_k_curve(
        [charts.Series("a <b>", "#111111", [charts.CurvePoint(1, 0.5, 0.3, 0.7), charts.CurvePoint(2, 0.6)])]
    )
    pareto = charts.cost_vs_pass([_point("1", 0.2, 0.4), _point("2", 0.0, 0.1)])
    for svg, x_title, y_title in (
        (curve, "k (attempts per task)", "pass@k"),
        (pareto, "LLM cost per task (USD)", "pass@1"),
    ):
        root = ET.fromstring(svg)  # also proves labels are escaped
        assert root.get("role") == "img" and root.get("aria-label")
        titles = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "axis-title"]
        assert titles == [x_title, y_title]
        ticks = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "tick"]
        assert "0%" in ticks and "100%" in ticks
    assert "a &lt;b&gt;" in curve
    assert ET.fromstring(pareto).find(f"{SVG}path[@class='frontier']") is not None


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("pct", 0.8751875937968985, "87.5%"),
        ("pct", None, "—"),
        ("duration", 3.21, "3.2 s"),
        ("duration", 125, "2 m 05 s"),
        ("duration", 7260, "2 h 01 m"),
        ("money", 0.01234, "$0.0123"),
        ("money", 0.000037, "$0.000037"),
        ("money", 12.5, "$12.50"),
        ("tokens", 12345, "12k"),
        ("pvalue", 0.001953125, "0.002"),
        ("pvalue", 1.0, "1"),
        ("signed_pp", -0.1, "-10.0 pp"),
        ("ci", {"value": 0.6, "ci_low": 0.2307242812760128, "ci_high": 0.882379225767352}, "23.1–88.2%"),
    ],
)
def test_filters_format_like_the_rest_of_the_product(name: str, value: Any, expected: str) -> None:
    assert FILTERS[name](value) == expected


def test_filters_treat_a_missing_template_value_as_none() -> None:
    """A run without scores yet: `m.cost_per_task` is Jinja's Undefined, which must read as missing."""
    env = Environment()
    env.filters.update(FILTERS)
    assert env.from_string("{{ m.cost_per_task|money }} {{ m.x|pct }}").render(m={}) == "— —"


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("/benchmarks/bm_1?sort=pass_at_k", "/benchmarks/bm_1?sort=pass_at_k"),
        ("//evil.example/x", "/benchmarks"),
        ("https://evil.example/", "/benchmarks"),
        ("/\\evil.example", "/benchmarks"),
        (None, "/benchmarks"),
    ],
)
def test_sign_in_only_redirects_within_the_site(target: str | None, expected: str) -> None:
    assert safe_next(target) == expected


async def _call(method: str, headers: dict[str, str], path: str = "/api/v1/runs") -> str | None:
    seen: dict[str, Any] = {}

    async def app(scope: dict[str, Any], _receive: Any, _send: Any) -> None:
        seen.update(dict(scope["headers"]))

    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
    }
    await CookieBearerMiddleware(app)(scope, None, None)
    value = seen.get(b"authorization")
    return value.decode() if value else None


async def test_the_cookie_authenticates_api_reads_and_ui_writes_only() -> None:
    cookie = {"Cookie": "other=1; regatta_token=rg_abc"}
    assert await _call("GET", cookie) == "Bearer rg_abc"
    # A write needs the UI's own header too: a cross-site form cannot add it (CSRF).
    assert await _call("POST", cookie) is None
    assert await _call("POST", {**cookie, "X-Regatta-UI": "1"}) == "Bearer rg_abc"
    # An explicit token wins; other paths are untouched.
    assert await _call("GET", {**cookie, "Authorization": "Bearer rg_cli"}) == "Bearer rg_cli"
    assert await _call("GET", cookie, path="/api/cli/benchmarks") is None
    assert await _call("GET", {}) is None


@pytest.mark.parametrize("top", [0.000037, 0.00012, 0.0013, 0.004, 0.31, 1.7, 12.0, 2500.0])
def test_the_cost_axis_never_repeats_a_label(top: float) -> None:
    """Issue 19: small costs once drew "$0.0001" twice (and "$0." for the smallest) on the axis."""
    svg = charts.cost_vs_pass([_point("1", top, 0.5), _point("2", top / 3, 0.2)])
    labels = re.findall(r'<text class="tick" [^>]*text-anchor="middle">([^<]*)</text>', svg)
    assert len(labels) >= 3 and len(set(labels)) == len(labels), labels
    assert all(re.fullmatch(r"\$[0-9,]+(\.[0-9]+)?", label) for label in labels), labels


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("/usr/bin/ls", "/usr/bin/ls"),
        ("/tmp/\u202eexe.sh", "/tmp/\\u202eexe.sh"),  # right-to-left override: would show "hs.exe"
        ("/usr/bin/l\u200bs", "/usr/bin/l\\u200bs"),  # zero-width space: two names that look alike
        ("a\nb\x1b[31m", "a\\u000ab\\u001b[31m"),
        ("/opt/café/ü", "/opt/café/ü"),
        ("/" + "x" * 5000, "/" + "x" * 4095 + "… (905 more characters)"),
        (None, ""),
    ],
)
def test_evidence_text_spells_out_what_would_hide_or_reorder_it(text: str | None, shown: str) -> None:
    assert visible(text) == shown


def test_an_attempts_evidence_reads_with_its_totals_never_below_what_it_names() -> None:
    evidence = AttemptIntegrity(
        changes=[
            ToolChainChange(path="/usr/bin/a", change="added"),
            ToolChainChange(path="/usr/bin/b", change="deleted"),
            ToolChainChange(
                path="/usr/bin/c", change="changed", explained_by=Explanation(source="dpkg", package="c")
            ),
        ],
        changes_total=0,
        unexplained=0,
    )
    view = integrity_view(evidence.model_dump())
    assert view is not None
    assert (view["changes_total"], view["unexplained"]) == (3, 1)
    assert [c["unexplained"] for c in view["changes"]] == [True, False, False]
    assert view["changes"][2]["trust"] == "a record in the container, which the agent can write"
    assert integrity_view(None) is None
    assert integrity_view({"checked": False})["checked"] is False  # type: ignore[index]


def test_view_source_says_each_field_as_text_never_as_a_python_value() -> None:
    stored = {
        "type": "folder",
        "ref": "/srv/tasks",
        "version": None,
        "metadata": {"description": "Small tasks", "tags": ["shell", "files"], "parity": False},
        "trusted": True,
    }
    facts = source_facts(stored)
    assert not any(re.search(r"\b(True|False|None)\b|[{}\[\]']", text) for text in facts.values()), facts
    assert "trusted" not in facts and facts["trust"].startswith("trusted")
    assert facts["metadata"] == "description: Small tasks; tags: shell, files; parity: no"
    assert "version" not in facts  # unset
    assert "trust" not in source_facts({**stored, "trusted": False})  # the default says nothing
