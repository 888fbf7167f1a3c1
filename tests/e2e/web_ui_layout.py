"""A person's look at a part of a page, in a real browser: every piece of visible text is on the screen
(not cut at a side of the screen or of its box) and no two pieces of text are drawn over each other. Text
scrolled out of its own scrolling box is not visible, so it is not counted; text clipped by one is counted
where it shows.
"""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Page

from tests.e2e.web_ui_support import PHONE, shot

# For each visible text fragment (one rectangle per line box), the part inside every clipping ancestor and
# the viewport; then any two fragments of different text nodes that cover each other by more than 1 px.
LOOK = """
(selector) => {
  const root = document.querySelector(selector);
  if (!root) return { texts: [], problems: [`${selector} is not on the page`] };
  const clipOf = (element) => {
    let clip = { left: 0, top: 0, right: innerWidth, bottom: innerHeight, scrollsSideways: false };
    for (let node = element; node; node = node.parentElement) {
      const style = getComputedStyle(node);
      // A box made to scroll sideways (a wide table); a dialog or the page that does is a fault.
      const page = ["DIALOG", "BODY", "HTML"].includes(node.tagName);
      if (["auto", "scroll"].includes(style.overflowX) && !page) {
        clip.scrollsSideways = true;
      }
      if (style.overflowX !== "visible" || style.overflowY !== "visible") {
        const box = node.getBoundingClientRect();
        clip = { ...clip, left: Math.max(clip.left, box.left), top: Math.max(clip.top, box.top),
                 right: Math.min(clip.right, box.right), bottom: Math.min(clip.bottom, box.bottom) };
      }
    }
    return clip;
  };
  const fragments = [];
  const problems = [];
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  let index = 0;
  for (let node = walker.nextNode(); node; node = walker.nextNode(), index++) {
    const text = node.textContent.replace(/\\s+/g, " ").trim();
    const element = node.parentElement;
    if (!text || !element || element.closest("[hidden], .sr-only, script, style, template")) continue;
    const shut = element.closest("details:not([open])");
    if (shut && !element.closest("summary")?.parentElement?.isSameNode(shut)) continue;
    if (!element.checkVisibility({ opacityProperty: true, visibilityProperty: true })) continue;
    const style = getComputedStyle(element);
    const range = document.createRange();
    range.selectNodeContents(node);
    const clip = clipOf(element);
    for (const rect of range.getClientRects()) {
      if (rect.width < 1 || rect.height < 1) continue;
      // Cut at the screen's or a box's side, with no sideways scrolling meant to reach it.
      const ellipsis = style.textOverflow === "ellipsis"; // cut on purpose, and shown to be
      if (!clip.scrollsSideways && !ellipsis && (rect.right > clip.right + 1 || rect.left < clip.left - 1)) {
        const at = (a, b) => `${Math.round(a)}..${Math.round(b)}px`;
        problems.push(
          `"${text.slice(0, 50)}" is cut off at the side (${at(rect.left, rect.right)}, ` +
          `room ${at(clip.left, clip.right)})`,
        );
      }
      const shown = { left: Math.max(rect.left, clip.left), top: Math.max(rect.top, clip.top),
                      right: Math.min(rect.right, clip.right), bottom: Math.min(rect.bottom, clip.bottom) };
      if (shown.right - shown.left < 1 || shown.bottom - shown.top < 1) continue;
      fragments.push({ index, text, ...shown });
    }
  }
  for (let i = 0; i < fragments.length; i++) {
    for (let j = i + 1; j < fragments.length; j++) {
      const a = fragments[i], b = fragments[j];
      if (a.index === b.index) continue;
      const width = Math.min(a.right, b.right) - Math.max(a.left, b.left);
      const height = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
      if (width > 1 && height > 1) {
        problems.push(`"${a.text.slice(0, 50)}" overlaps "${b.text.slice(0, 50)}"`);
      }
    }
  }
  return { texts: [...new Set(fragments.map((f) => f.text))], problems };
}
"""


def look(page: Page, selector: str) -> dict[str, Any]:
    """The texts a person sees in `selector`, and what would stop them reading it."""
    return page.evaluate(LOOK, selector)


def assert_readable(page: Page, selector: str, *texts: str) -> list[str]:
    """Every text of `selector` on screen and apart from the others; each of `texts` among them."""
    seen = look(page, selector)
    assert not seen["problems"], seen["problems"]
    shown = " ".join(seen["texts"])
    missing = [text for text in texts if text not in shown]
    assert not missing, f"not visible in {selector}: {missing}; visible: {seen['texts']}"
    return seen["texts"]


def check_both_widths(
    page: Page, selector: str, name: str, *texts: str, scroll_to: str | None = None
) -> None:
    """`assert_readable` at the test's desktop width and at a phone's, with a screenshot of each;
    `scroll_to` is what a person would scroll to first (the smaller screen may show it only then)."""
    if scroll_to:
        page.locator(scroll_to).scroll_into_view_if_needed()
    shot(page, name)  # first, so a failure leaves the picture of what was wrong
    assert_readable(page, selector, *texts)
    size = page.viewport_size
    page.set_viewport_size(PHONE)
    # Two animation frames: the new size has been laid out and painted (no fixed pause).
    page.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"{name}: the page is {width}px wide on a phone"
    if scroll_to:
        page.locator(scroll_to).scroll_into_view_if_needed()
    shot(page, f"{name}-phone")
    assert_readable(page, selector, *texts)
    if size:
        page.set_viewport_size(size)
        page.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")
