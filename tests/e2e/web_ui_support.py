"""Helpers of the web UI tests (test_web_ui_*.py): a real browser (Debian chromium + Playwright) against the
running stack. Every wait is bounded. Screenshots of each main page, at 1280 px and at a phone's 390 × 844,
land in test-artifacts/screenshots/ (gitignored) so a person can look at them; web_ui_layout.py checks them
as a person would.
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


def wide_shot(page: Page, name: str, width: int = 1400) -> None:
    """The page at `width` × 900 (assert_readable checks 1280, 1440, 1600 and the phone), screenshot
    `name-<width>`; the page must not scroll sideways."""
    size = page.viewport_size
    page.set_viewport_size({"width": width, "height": 900})
    page.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")
    scroll = page.evaluate("document.documentElement.scrollWidth")
    assert scroll <= width, f"{name}: the page is {scroll}px wide at {width}px"
    shot(page, f"{name}-{width}")
    if size:
        page.set_viewport_size(size)


def sign_in(page: Page, stack: Any) -> None:
    """Signed in as the stack's admin; on a shared stack (a `Tenant`) in the test's own workspace, by the
    cookie the workspace switcher sets (so the pages and their scripts' API calls act in it)."""
    page.set_default_timeout(WAIT)
    workspace_id = getattr(stack, "workspace_id", None)
    if workspace_id:
        page.context.add_cookies([{"name": "regatta_workspace", "value": workspace_id, "url": stack.url}])
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


def assert_apart(first: Any, second: Any, what: str) -> None:
    """Two located elements' boxes do not intersect (e.g. a tooltip and the next row)."""
    a, b = first.bounding_box(), second.bounding_box()
    assert a and b, f"{what}: an element is not rendered"
    overlap_w = min(a["x"] + a["width"], b["x"] + b["width"]) - max(a["x"], b["x"])
    overlap_h = min(a["y"] + a["height"], b["y"] + b["height"]) - max(a["y"], b["y"])
    assert overlap_w <= 0 or overlap_h <= 0, f"{what}: {a} overlaps {b}"
