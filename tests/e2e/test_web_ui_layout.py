"""The person-like readability check (web_ui_layout.assert_readable) fails on each fault it is there to
find, and passes a page without one: small pages written here, drawn by the real browser."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page

from tests.e2e.web_ui_layout import assert_readable

WIDE = "wide " * 100
ELLIPSIS = "cut on purpose " * 10
FINE = f"""<main><h1>Runs</h1><p>Two runs, both finished.</p>
<div style="overflow-x: auto"><table><tr><td style="white-space: nowrap">{WIDE}</td></tr></table></div>
<div class="table-wrap" style="overflow-x: auto"><table style="width: 800px">
<tr><td>fits a desktop, scrolls on a phone</td></tr></table></div>
<p style="max-width: 10rem; overflow: hidden; text-overflow: ellipsis; white-space: nowrap">{ELLIPSIS}</p>
<p style="width: 8rem">Words wrap between one another as a paragraph does.</p>
<p style="width: 8rem; overflow-wrap: anywhere">https://example.com/a/very/long/address/of/a/page</p>
<p style="width: 12rem; overflow-wrap: anywhere">Datasets of /tmp/pytest-of-root/a/registry.json</p>
<a href="#main" style="position: absolute; left: -999px">Skip to content</a>
<div id="toast" class="toast" hidden>Saved</div></main>"""

FAULTS = {
    "overlaps": '<p style="margin: 0">First line</p><p style="margin: -0.5em 0 0">Second line</p>',
    # Several times wider than its box in any font, whichever has loaded when the check runs.
    "cut off at the side": '<p style="width: 4rem; overflow: hidden; white-space: nowrap">'
    "a long name that is cut off well past its box</p>",
    "wide at": '<div style="width: 2000px; height: 1px"></div>',
    "cut off at its chart": '<svg width="100" height="40"><text x="80" y="20">$0.0001</text></svg>',
    "scrolls sideways": '<dialog open style="overflow: auto; width: 9rem"><p style="width: 30rem">x</p>'
    "</dialog>",
    "tables scroll sideways at 1280px": '<div class="table-wrap" style="overflow-x: auto"><table>'
    f'<tr><td style="white-space: nowrap">{WIDE}</td></tr></table></div>',
    "broken across lines": '<p style="width: 3ch; overflow-wrap: anywhere">Unlimited</p>',
    "not visible": '<p>Shown</p><p hidden>Expected</p><p style="visibility: hidden">Expected</p>',
}


def test_a_page_without_faults_is_readable_at_both_widths(page: Page) -> None:
    page.set_content(FINE)
    assert_readable(page, "layout-check-fine", ["Runs", "Two runs, both finished."])
    assert page.viewport_size == {"width": 1280, "height": 900}  # left as it was


@pytest.mark.parametrize("fault", FAULTS)
def test_each_fault_a_person_would_see_fails_the_check(page: Page, fault: str) -> None:
    page.set_content(f"<main><h1>Page</h1>{FAULTS[fault]}</main>")
    expected = ["Expected"] if fault == "not visible" else []
    # set_content returns once the page loaded; its fonts may still be coming, which each fault above
    # survives (it is many times the size of its box), and the check lays the page out at every size.
    page.evaluate("() => document.fonts.ready.then(() => true)")
    with pytest.raises(AssertionError, match=fault):
        assert_readable(page, f"layout-check-{fault.replace(' ', '-')}", expected, wait=500)
