"""An attempt's exception message, bounded: the reason a person reads on the run page.

Harbor puts a failed command's whole stdout and stderr in its exception message (an agent's install
prints kilobytes of apt or pip output). The full text stays in the attempt's `exception.txt`
artifact; the report carries the headline and the last lines that say something, so an event, a
list of attempts and the run page stay small whatever a task or harness prints.
"""

from __future__ import annotations

import re

LIMIT = 400
HEADLINE = 160
# Lines that carry no reason: progress output, blank or punctuation-only lines, apt's read-outs.
_NOISE = re.compile(
    r"^\s*$|^[\s\W_]+$|^(Get|Hit|Ign|Fetched|Reading|Building|Preparing|Unpacking|Selecting|Setting up)\b"
)
_SECTION = re.compile(r"^(stdout|stderr):\s?", re.MULTILINE)
FULL_LOG = "exception.txt"


def short_reason(message: str | None, limit: int = LIMIT) -> str | None:
    """`message` when it fits in `limit` characters; else its first line (bounded) and the last
    meaningful lines of its stderr (or of its stdout when stderr says nothing), at most `limit`
    characters in all, with a pointer to the full text."""
    if message is None or len(message) <= limit:
        return message
    head, _, rest = message.partition("\n")
    headline = head if len(head) <= HEADLINE else head[: HEADLINE - 1] + "…"
    sections = dict(_sections(rest))
    body = sections.get("stderr", "") if _meaningful(sections.get("stderr", "")) else ""
    if not body:
        body = sections.get("stdout", "") if sections else rest
    note = f"(full text in {FULL_LOG})"
    budget = limit - len(headline) - len(note) - 2
    tail: list[str] = []
    for line in reversed(_meaningful(body)):
        line = line.strip()
        if len(line) > budget - sum(len(t) + 1 for t in tail):
            if not tail:
                tail.append("…" + line[-(budget - 1) :] if budget > 1 else "")
            break
        tail.insert(0, line)
    return "\n".join(part for part in (headline, *tail, note) if part)[:limit]


def _sections(text: str) -> list[tuple[str, str]]:
    marks = list(_SECTION.finditer(text))
    return [
        (mark.group(1), text[mark.end() : marks[i + 1].start() if i + 1 < len(marks) else len(text)])
        for i, mark in enumerate(marks)
    ]


def _meaningful(text: str) -> list[str]:
    return [line for line in text.splitlines() if not _NOISE.match(line) and line.strip() != "None"]
