"""Helpers of the web UI tests (test_web_ui_*.py): a real browser (Debian chromium + Playwright) against the
running stack. Every wait is bounded. Screenshots of each main page, at 1280 px and at a phone's 390 × 844,
land in test-artifacts/screenshots/ (gitignored) so a person can look at them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, expect

from tests.support.tasks import write_task

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "test-artifacts" / "screenshots"
WAIT = 30_000  # ms, Playwright's default for every action and assertion in these tests
LONG = 150_000  # ms, for waits on real work (a sync, a run)
RUN = 240_000  # ms, for a 20-attempt run to finish on a loaded 2-core machine
PHONE = {"width": 390, "height": 844}
# An attempt that fails inside an executor is redelivered after the ack wait (30 s by default); a
# short one keeps these tests quick when that happens. Live attempts heartbeat, so none is cut short.
ACK_WAIT = {"REGATTA_JOB_ACK_WAIT": "6"}
expect.set_options(timeout=WAIT)


# --- helpers --------------------------------------------------------------------------------------------


def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=SHOTS / f"{name}.png", full_page=True)


def phone_shot(page: Page, name: str) -> None:
    """The same page at a phone's size; the page must not scroll sideways (only its tables may)."""
    size = page.viewport_size
    page.set_viewport_size(PHONE)
    # Two animation frames: the new size has been laid out and painted (no fixed pause).
    page.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"{name}: the page is {width}px wide on a phone"
    shot(page, f"{name}-phone")
    if size:
        page.set_viewport_size(size)


# Every visible piece of text in `root`: its words and where they were drawn. Screen-reader-only text
# and closed controls' options are not drawn and a toast passes by; text in a sideways-scrolling table
# may pass the screen's edge.
_TEXT_BOXES = """(root) => {
  const walker = document.createTreeWalker(document.querySelector(root), NodeFilter.SHOW_TEXT);
  const boxes = [];
  while (walker.nextNode()) {
    const node = walker.currentNode;
    const parent = node.parentElement;
    const skipped = ".sr-only, .toast, option, datalist, script, style";
    if (!node.textContent.trim() || parent.closest(skipped)) continue;
    const style = getComputedStyle(parent);
    if (style.visibility === "hidden" || Number(style.opacity) === 0) continue;
    const range = document.createRange();
    range.selectNodeContents(node);
    for (const r of range.getClientRects()) {
      if (r.width < 1 || r.height < 1 || r.right <= 0) continue; // a skip link waits off-screen
      const scrolls = parent.closest(".table-wrap, .subnav, .tabs") !== null;
      const text = node.textContent.trim().slice(0, 50);
      boxes.push({ text, x: r.left, y: r.top + scrollY, w: r.width, h: r.height, scrolls });
    }
  }
  return boxes;
}"""


def _readable_at_this_size(page: Page, name: str, must_show: list[str], root: str = "body") -> None:
    """What a person checks on a screenshot: the `must_show` texts are drawn, no two pieces of text are
    drawn over each other, and none runs off the side of the screen (tables scroll, so theirs may)."""
    boxes = page.evaluate(_TEXT_BOXES, root)
    drawn = " ".join(box["text"] for box in boxes)
    missing = [text for text in must_show if text not in drawn]
    assert not missing, f"{name}: not drawn: {missing}"
    width = page.evaluate("window.innerWidth")
    off = [b["text"] for b in boxes if not b["scrolls"] and (b["x"] < -1 or b["x"] + b["w"] > width + 1)]
    assert not off, f"{name}: text runs off the screen: {off[:5]}"
    overlaps = []
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            across = min(a["x"] + a["w"], b["x"] + b["w"]) - max(a["x"], b["x"])
            down = min(a["y"] + a["h"], b["y"] + b["h"]) - max(a["y"], b["y"])
            if across > 2 and down > 2:
                overlaps.append((a["text"], b["text"]))
    assert not overlaps, f"{name}: text drawn over other text: {overlaps[:5]}"


def checked_shots(page: Page, name: str, must_show: list[str]) -> None:
    """Screenshots at desktop and phone widths, each checked as a person would look at it."""
    _readable_at_this_size(page, name, must_show)
    shot(page, name)
    size = page.viewport_size
    page.set_viewport_size(PHONE)
    page.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")
    _readable_at_this_size(page, f"{name}-phone", must_show)
    if size:
        page.set_viewport_size(size)
    phone_shot(page, name)


def sign_in(page: Page, stack: Any) -> None:
    page.set_default_timeout(WAIT)
    page.goto(f"{stack.url}/benchmarks")
    expect(page).to_have_url(re.compile(r"/signin\?next=%2Fbenchmarks$"))
    page.get_by_label("API token").fill(stack.token)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(f"{stack.url}/benchmarks")


def mark_page(page: Page) -> None:
    """A flag in the page's JS heap: still there later means the page was never reloaded."""
    page.evaluate("window.__sameDocument = true")


def assert_same_page(page: Page) -> None:
    assert page.evaluate("window.__sameDocument === true"), "the page reloaded instead of updating in place"


def write_tasks(root: Path, count: int, *, sleep: float = 0.0, prefix: str = "task") -> None:
    """`count` tiny Harbor tasks whose reference solution passes (after `sleep` seconds)."""
    for index in range(count):
        solve = f"sleep {sleep}\necho done > /app/out.txt"
        write_task(root, f"{prefix}-{index:03d}", solve=solve, category="odd" if index % 2 else "even")


ATIF_TRAJECTORY = """{"schema_version": "ATIF-v1.6", "session_id": "s1",
 "agent": {"name": "oracle", "version": "1"},
 "steps": [
  {"step_id": 1, "source": "user", "message": "Write done to /app/out.txt"},
  {"step_id": 2, "source": "agent", "model_name": "demo-model", "message": "I will write the file.",
   "tool_calls": [{"tool_call_id": "c1", "function_name": "bash", "arguments": {"command": "echo done"}}],
   "observation": {"results": [{"source_call_id": "c1", "content": "(no output)"}]}},
  {"step_id": 3, "source": "agent", "message": "The file is written."}]}"""


def write_talking_task(root: Path) -> None:
    """One task whose reference solution also leaves a Harbor (ATIF) trajectory in /logs/agent."""
    write_tasks(root, 1, prefix="talk")
    solve = root / "talk-000" / "solution" / "solve.sh"
    solve.write_text(
        f"{solve.read_text()}cat > /logs/agent/trajectory.json <<'JSON'\n{ATIF_TRAJECTORY}\nJSON\n"
    )


def add_folder_benchmark(api: Any, path: Path, name: str) -> str:
    response = api.http.post(
        "/api/v1/benchmarks", json={"source_type": "folder", "path": str(path), "name": name}
    )
    assert response.status_code == 201, response.text
    return response.json()["id"]


# --- person-like checks ---------------------------------------------------------------------------------
# What a person looking at a screenshot would notice: text that is not there, text drawn over other text,
# a page wider than the phone. Text boxes come from the rendered text nodes (Range rects), so a cell whose
# content spills onto its neighbour counts, and hidden or screen-reader-only text does not.

_TEXT_BOXES = """(selector) => {
  const root = selector ? document.querySelector(selector) : document.body;
  if (!root) return null;
  const boxes = [];
  let owner = 0;  // lines of one text node may touch each other; only different texts are compared
  const box = (text, r) => ({ text: text.slice(0, 60), owner, l: r.left, t: r.top, r: r.right, b: r.bottom });
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const text = node.textContent.trim();
    const parent = node.parentElement;
    if (!text || !parent) continue;
    const skipped = ".sr-only, [hidden], option, select, script, style, noscript, template, svg";
    if (parent.closest(skipped)) continue;
    if (!parent.checkVisibility({ visibilityProperty: true, opacityProperty: true })) continue;
    const range = document.createRange();
    range.selectNodeContents(node);
    owner += 1;
    for (const r of range.getClientRects()) {
      if (r.width > 1 && r.height > 1) boxes.push(box(text, r));
    }
  }
  const clipped = [];
  for (const label of root.querySelectorAll("svg text")) {
    const r = label.getBoundingClientRect();
    const frame = label.ownerSVGElement.getBoundingClientRect();
    if (r.left < frame.left - 1 || r.right > frame.right + 1) clipped.push(label.textContent.trim());
    owner += 1;
    if (r.width > 1 && r.height > 1) boxes.push(box(label.textContent.trim(), r));
  }
  const overlaps = [];
  for (let i = 0; i < boxes.length; i++) {
    for (let j = i + 1; j < boxes.length; j++) {
      const a = boxes[i], b = boxes[j];
      if (a.owner === b.owner) continue;
      const w = Math.min(a.r, b.r) - Math.max(a.l, b.l);
      const h = Math.min(a.b, b.b) - Math.max(a.t, b.t);
      if (w > 2 && h > 2) overlaps.push([a.text, b.text]);
    }
  }
  return { texts: boxes.map((b) => b.text), overlaps: overlaps.slice(0, 10), clipped };
}"""


def assert_readable(
    page: Page, name: str, texts: list[str] | tuple[str, ...] = (), selector: str = ""
) -> None:
    """At the desktop size and a phone's: each of `texts` is visible on the page, no text is drawn over
    other text (inside `selector`, or the whole page), no chart label is cut off at the chart's edge, and the
    page does not scroll sideways. Leaves
    screenshots of both sizes (`name`, `name-phone`)."""
    size = page.viewport_size
    for width, height, suffix in ((1280, 900, ""), (PHONE["width"], PHONE["height"], "-phone")):
        page.set_viewport_size({"width": width, "height": height})
        page.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")
        for text in texts:
            expect(page.get_by_text(text, exact=False).first).to_be_visible()
        shot(page, f"{name}{suffix}")
        found = page.evaluate(_TEXT_BOXES, selector)
        assert found is not None, f"{name}{suffix}: nothing matches {selector!r}"
        assert found["texts"], f"{name}{suffix}: no visible text"
        assert not found["overlaps"], f"{name}{suffix}: text drawn over other text: {found['overlaps']}"
        assert not found["clipped"], f"{name}{suffix}: chart labels cut off at its edge: {found['clipped']}"
        scroll = page.evaluate("document.documentElement.scrollWidth")
        assert scroll <= width, f"{name}{suffix}: the page is {scroll}px wide at {width}px"
    if size:
        page.set_viewport_size(size)


def assert_apart(first: Any, second: Any, what: str) -> None:
    """Two located elements' boxes do not intersect (e.g. a tooltip and the next row)."""
    a, b = first.bounding_box(), second.bounding_box()
    assert a and b, f"{what}: an element is not rendered"
    overlap_w = min(a["x"] + a["width"], b["x"] + b["width"]) - max(a["x"], b["x"])
    overlap_h = min(a["y"] + a["height"], b["y"] + b["height"]) - max(a["y"], b["y"])
    assert overlap_w <= 0 or overlap_h <= 0, f"{what}: {a} overlaps {b}"
