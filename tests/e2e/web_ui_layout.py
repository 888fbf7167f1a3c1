"""A person's look at a page, in a real browser, at a desktop's size and at a phone's: the expected texts
are drawn, no two pieces of text are drawn over each other, no text is cut at a side of the screen or of
its box, no short word is broken across two lines, no chart label is cut at its chart's edge, and neither
the page nor a dialog scrolls sideways. Screenshots of both sizes land in test-artifacts/screenshots/ so a
person can look at them too.

What counts as drawn: text whose box is rendered (not hidden, transparent, screen-reader-only or in a
closed `<details>`), in the part left by every box that clips it. The page itself scrolls down, so text
below the fold counts; a fixed box (a dialog) does not, so what lies past the screen's bottom in it does
not; nor does text scrolled out of its own scrolling box (`scroll_to` brings it in first). A toast is let
pass first: it floats over the page for a few seconds on purpose.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import suppress
from typing import Any

from playwright.sync_api import Error, Page, expect

from tests.e2e.web_ui_support import PHONE, WAIT, shot

DESKTOP = {"width": 1280, "height": 900}
# Desktop widths people use: a table must fit each without scrolling sideways (the phone may scroll one).
DESKTOPS = (DESKTOP, {"width": 1440, "height": 900}, {"width": 1600, "height": 900})

# A `.table-wrap` scrolls sideways only when its table is wider than it: at a desktop's width that
# means columns past the right edge that a person does not see unless they think to scroll.
_WIDE_TABLES = """
(selector) => [...document.querySelectorAll(`${selector} .table-wrap`)]
  .filter((wrap) => wrap.checkVisibility() && wrap.scrollWidth > wrap.clientWidth + 1)
  .map((wrap) => `${wrap.querySelector("caption, th")?.textContent.trim().slice(0, 40) || "a table"}: ` +
                 `${wrap.scrollWidth}px in ${wrap.clientWidth}px`)
"""

# For each drawn text fragment (one rectangle per line box) the part inside every clipping ancestor and
# the screen; then what a person would object to: a fragment cut at a side it cannot be scrolled to, a
# chart label past its chart's frame, a dialog wider than itself, two fragments of different texts that
# cover each other by more than 1 px.
LOOK = """
(selector) => {
  const root = document.querySelector(selector);
  if (!root) return { texts: [], problems: [`${selector} is not on the page`] };
  const clipOf = (element) => {
    let clip = { left: 0, top: -Infinity, right: innerWidth, bottom: Infinity };
    let scrollsSideways = false, ellipsis = false, fixed = false;
    for (let node = element; node; node = node.parentElement) {
      const style = getComputedStyle(node);
      if (style.position === "fixed") fixed = true;
      // The page's own overflow is the screen's, handled by the screen's sides above.
      if (["BODY", "HTML"].includes(node.tagName)) continue;
      if (style.overflowX === "visible" && style.overflowY === "visible") continue;
      // A box made to scroll sideways (a wide table) may hold text past its side; a dialog may not.
      if (["auto", "scroll"].includes(style.overflowX) && node.tagName !== "DIALOG") scrollsSideways = true;
      if (style.textOverflow === "ellipsis") ellipsis = true; // cut on purpose, and shown to be
      const box = node.getBoundingClientRect();
      clip = { left: Math.max(clip.left, box.left), top: Math.max(clip.top, box.top),
               right: Math.min(clip.right, box.right), bottom: Math.min(clip.bottom, box.bottom) };
    }
    // A fixed box does not move when the page scrolls: past the screen's bottom it is never seen.
    if (fixed) clip = { ...clip, top: Math.max(clip.top, 0), bottom: Math.min(clip.bottom, innerHeight) };
    return { clip, scrollsSideways, ellipsis };
  };
  const at = (a, b) => `${Math.round(a)}..${Math.round(b)}px`;
  const fragments = [];
  const problems = [];
  const add = (index, text, rect, clip) => {
    const shown = { left: Math.max(rect.left, clip.left), top: Math.max(rect.top, clip.top),
                    right: Math.min(rect.right, clip.right), bottom: Math.min(rect.bottom, clip.bottom) };
    if (shown.right - shown.left < 1 || shown.bottom - shown.top < 1) return;
    fragments.push({ index, text, ...shown });
  };
  const skipped = "[hidden], .sr-only, script, style, template, noscript, option, select, datalist, svg";
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  let index = 0;
  for (let node = walker.nextNode(); node; node = walker.nextNode(), index++) {
    const text = node.textContent.replace(/\\s+/g, " ").trim();
    const element = node.parentElement;
    if (!text || !element || element.closest(skipped)) continue;
    const shut = element.closest("details:not([open])");
    if (shut && !element.closest("summary")?.parentElement?.isSameNode(shut)) continue;
    if (!element.checkVisibility({ opacityProperty: true, visibilityProperty: true })) continue;
    const range = document.createRange();
    range.selectNodeContents(node);
    const { clip, scrollsSideways, ellipsis } = clipOf(element);
    for (const rect of range.getClientRects()) {
      if (rect.width < 1 || rect.height < 1) continue;
      if (rect.right <= 0) continue; // wholly off the screen's left until focused (a skip link)
      if (!scrollsSideways && !ellipsis && (rect.right > clip.right + 1 || rect.left < clip.left - 1)) {
        problems.push(
          `"${text.slice(0, 50)}" is cut off at the side (${at(rect.left, rect.right)}, ` +
          `room ${at(clip.left, clip.right)})`,
        );
      }
      add(index, text, rect, clip);
    }
  }
  // Chart labels: an SVG clips what passes its frame, on any side.
  for (const label of root.querySelectorAll("svg text")) {
    index++;
    const text = label.textContent.replace(/\\s+/g, " ").trim();
    if (!text || !label.checkVisibility({ opacityProperty: true, visibilityProperty: true })) continue;
    const rect = label.getBoundingClientRect();
    if (rect.width < 1 || rect.height < 1) continue;
    const frame = label.ownerSVGElement.getBoundingClientRect();
    if (rect.left < frame.left - 1 || rect.right > frame.right + 1 ||
        rect.top < frame.top - 1 || rect.bottom > frame.bottom + 1) {
      problems.push(`chart label "${text.slice(0, 50)}" is cut off at its chart's edge`);
    }
    const { clip } = clipOf(label.ownerSVGElement);
    add(index, text, rect, { left: Math.max(clip.left, frame.left), top: Math.max(clip.top, frame.top),
                             right: Math.min(clip.right, frame.right),
                             bottom: Math.min(clip.bottom, frame.bottom) });
  }
  const dialogs = [...root.querySelectorAll("dialog[open]")];
  if (root.matches("dialog[open]")) dialogs.push(root);
  for (const dialog of dialogs) {
    if (dialog.scrollWidth > dialog.clientWidth + 1) {
      problems.push(`the dialog scrolls sideways (${dialog.scrollWidth}px in ${dialog.clientWidth}px)`);
    }
  }
  for (let i = 0; i < fragments.length; i++) {
    for (let j = i + 1; j < fragments.length; j++) {
      const a = fragments[i], b = fragments[j];
      if (a.index === b.index) continue; // lines of one text may touch each other
      const width = Math.min(a.right, b.right) - Math.max(a.left, b.left);
      const height = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
      if (width > 1 && height > 1) {
        problems.push(`"${a.text.slice(0, 50)}" overlaps "${b.text.slice(0, 50)}"`);
      }
    }
  }
  return { texts: [...new Set(fragments.map((f) => f.text))], problems: problems.slice(0, 10) };
}
"""

# A word of letters split across two lines ("Unlimite" / "d"): a box too narrow for it, where
# `overflow-wrap: anywhere` cuts it. What may be cut on purpose is not looked at: code (a monospace font:
# digests, paths), a single token longer than 20 characters (a URL, a long name), and any token that is not
# a word of letters (a path, an id).
BROKEN_WORDS = """
(selector) => {
  const root = document.querySelector(selector);
  if (!root) return [];
  const found = [];
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node && found.length < 10; node = walker.nextNode()) {
    const element = node.parentElement;
    if (!element || !element.checkVisibility({ opacityProperty: true, visibilityProperty: true })) continue;
    const text = node.textContent.trim();
    if (!/\\s/.test(text) && text.length > 20) continue;
    if (/mono/i.test(getComputedStyle(element).fontFamily)) continue;
    const whole = document.createRange();
    whole.selectNodeContents(node);
    const lines = new Set([...whole.getClientRects()].map((rect) => Math.round(rect.top)));
    if (lines.size < 2) continue; // on one line: nothing is split
    // A word between spaces, with the punctuation around it: "(evidence)," is a word, "registry.json" in
    // a path is not (a path, a URL or an id may break anywhere).
    for (const match of node.textContent.matchAll(/\\S+/g)) {
      const inner = /^[("'\u201c]*([A-Za-z]{2,20})[)"'\u201d.,:;!?]*$/.exec(match[0]);
      if (!inner) continue;
      const start = match.index + match[0].indexOf(inner[1]);
      const word = document.createRange();
      word.setStart(node, start);
      word.setEnd(node, start + inner[1].length);
      const tops = new Set([...word.getClientRects()].filter((r) => r.width >= 1)
        .map((rect) => Math.round(rect.top)));
      if (tops.size > 1) found.push(`"${match[0]}" is broken across lines`);
    }
  }
  return found;
}
"""

# True once every expected text is drawn: the page may still be filling in when the check starts.
_SHOWN = f"""
([selector, texts]) => {{
  const drawn = ({LOOK})(selector).texts.join(" ");
  return texts.every((text) => drawn.includes(text));
}}
"""

_PAINTED = "() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))"


def look(page: Page, selector: str = "body") -> dict[str, Any]:
    """The texts a person sees in `selector`, and what would stop them reading it."""
    return page.evaluate(LOOK, selector)


def _readable_at_this_size(page: Page, name: str, texts: Sequence[str], selector: str, wait: float) -> None:
    with suppress(Error):  # a timeout: the assertions below say what is missing
        page.wait_for_function(_SHOWN, arg=[selector, list(texts)], timeout=wait)
    seen = look(page, selector)
    assert not seen["problems"], f"{name}: " + "; ".join(seen["problems"])
    broken = page.evaluate(BROKEN_WORDS, selector)
    assert not broken, f"{name}: " + "; ".join(broken)
    assert seen["texts"], f"{name}: no visible text in {selector}"
    drawn = " ".join(seen["texts"])
    missing = [text for text in texts if text not in drawn]
    assert not missing, f"{name}: not visible in {selector}: {missing}; visible: {seen['texts'][:40]}"
    width = page.viewport_size["width"] if page.viewport_size else DESKTOP["width"]
    scroll = page.evaluate("document.documentElement.scrollWidth")
    assert scroll <= width, f"{name}: the page is {scroll}px wide at {width}px"
    if width >= DESKTOP["width"]:
        wide = page.evaluate(_WIDE_TABLES, selector)
        assert not wide, f"{name}: tables scroll sideways at {width}px: " + "; ".join(wide)


def assert_readable(
    page: Page,
    name: str,
    texts: Sequence[str] = (),
    *,
    selector: str = "body",
    scroll_to: str | None = None,
    wait: float = WAIT,
    also: Sequence[dict[str, int]] = (),
) -> None:
    """At 1280, 1440 and 1600 × 900 and at a phone's 390 × 844: each of `texts` drawn in `selector` and
    everything in it readable (see the module's doc), the page no wider than the screen, and at the
    desktop widths no table scrolling sideways. Screenshots `name`, `name-1440`, `name-1600` and
    `name-phone`, each taken before its check so a failure leaves the picture of what was wrong.
    `scroll_to` is what a person would scroll to first (the smaller screen may show it only then).
    `wait` (ms, more than 0) bounds how long the texts may take to be drawn. `also`: more desktop sizes
    to check the same way (screenshot `name-<width>`).
    The page is left at the size it had."""
    assert not isinstance(texts, str), "texts is a list of texts"
    # A toast floats over the page for a few seconds by design; a person reads the page once it is gone.
    expect(page.locator(".toast:visible")).to_have_count(0)
    size = page.viewport_size
    try:
        desktops = [*DESKTOPS, *also]
        sizes = [(d, "" if d is DESKTOP else f"-{d['width']}") for d in desktops] + [(PHONE, "-phone")]
        for viewport, suffix in sizes:
            page.set_viewport_size(viewport)
            page.evaluate(_PAINTED)  # the new size laid out and painted (no fixed pause)
            if scroll_to:
                page.locator(scroll_to).scroll_into_view_if_needed()
            shot(page, f"{name}{suffix}")
            _readable_at_this_size(page, f"{name}{suffix}", texts, selector, wait)
    finally:
        if size:
            page.set_viewport_size(size)
            page.evaluate(_PAINTED)
