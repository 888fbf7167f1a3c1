"""Jinja filters: how numbers, times and intervals read on every page (one place, so pages agree)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from jinja2 import Undefined

NONE = "—"


def _missing_is_none(filter_: Callable[..., str]) -> Callable[..., str]:
    """Templates read attributes of runs that have no scores yet: Jinja's Undefined means missing."""

    @functools.wraps(filter_)
    def wrapped(value: Any, *args: Any, **kwargs: Any) -> str:
        return filter_(None if isinstance(value, Undefined) else value, *args, **kwargs)

    return wrapped


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def pct(value: float | None, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return NONE
    return f"{value * 100:.{digits}f}%"


def ci(metric: dict[str, Any] | None) -> str:
    """`[low–high]` of a `{value, ci_low, ci_high}` metric, in percent."""
    if not metric or metric.get("ci_low") is None or metric.get("ci_high") is None:
        return ""
    return f"{metric['ci_low'] * 100:.1f}–{metric['ci_high'] * 100:.1f}%"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return NONE
    seconds = max(0.0, float(seconds))
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} m {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} m"


def money(value: float | None) -> str:
    if value is None:
        return NONE
    if value == 0:
        return "$0.00"
    if abs(value) < 0.0001:  # a cached or tiny model's cost per attempt: two significant digits, not $0.0000
        return f"${value:.{1 - math.floor(math.log10(abs(value)))}f}"
    return f"${value:.4f}" if abs(value) < 1 else f"${value:,.2f}"


def tokens(value: float | None) -> str:
    if value is None:
        return NONE
    value = float(value)
    if value >= 1_000_000:
        return f"{value / 1_000_000:.1f}M"
    if value >= 10_000:
        return f"{value / 1000:.0f}k"
    if value >= 1000:
        return f"{value / 1000:.1f}k"
    return f"{value:.0f}"


def pvalue(value: float | None) -> str:
    if value is None:
        return NONE
    if value < 0.0001:
        return "< 0.0001"
    return f"{value:.4f}".rstrip("0").rstrip(".") if value < 1 else "1"


def signed_pp(value: float | None) -> str:
    """A difference of two rates in percentage points, always signed."""
    if value is None:
        return NONE
    return f"{value * 100:+.1f} pp"


def utc(value: str | None) -> str:
    """Absolute time for the first paint; the browser rewrites it to local time (static/app.js)."""
    parsed = parse_time(value)
    return parsed.strftime("%Y-%m-%d %H:%M UTC") if parsed else NONE


def ago(value: str | None, now: datetime | None = None) -> str:
    parsed = parse_time(value)
    if parsed is None:
        return NONE
    seconds = ((now or datetime.now(UTC)) - parsed).total_seconds()
    if seconds < 45:
        return "just now"
    for size, unit in ((86400 * 365, "y"), (86400 * 30, "mo"), (86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            return f"{int(seconds // size)} {unit} ago"
    return "just now"


def elapsed(start: str | None, end: str | None = None) -> float | None:
    begin = parse_time(start)
    if begin is None:
        return None
    finish = parse_time(end) or datetime.now(UTC)
    return max(0.0, (finish - begin).total_seconds())


FILTERS = {
    name: _missing_is_none(function)
    for name, function in {
        "pct": pct,
        "ci": ci,
        "duration": duration,
        "money": money,
        "tokens": tokens,
        "pvalue": pvalue,
        "signed_pp": signed_pp,
        "utc": utc,
        "ago": ago,
    }.items()
}
