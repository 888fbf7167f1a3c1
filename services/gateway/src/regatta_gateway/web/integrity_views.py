"""How pages word an attempt's integrity evidence (AttemptFinished.integrity, events/integrity.py) and the
policy it was recorded under.

Evidence, not a verdict: under `record` the score is the verifier's whatever is shown here. Every path,
name, command and note below comes from the attempt's container, so it is an attacker's text: templates
escape it, and `visible` spells out the characters that would hide or reorder it on screen (bidi
overrides, zero-width and control characters), so a path reads as what it is.
"""

from __future__ import annotations

import unicodedata
from typing import Any

from pydantic import ValidationError
from regatta_shared.events.integrity import AttemptIntegrity, FileFacts, ToolChainChange

POLICIES = {
    "record": "Record (Harbor's semantics, evidence shown)",
    "enforce": "Enforce (no agent process survives; unexplained tool-chain changes fail)",
}
MODES = {
    "shared": "shared: the verifier ran in the container the agent ran in",
    "separate": "separate: the verifier ran in a fresh container, with only the agent's collected outputs",
}
CHANGES = {"added": "added", "changed": "changed", "deleted": "deleted"}
EXPLAINED_BY = {
    "dpkg": "the checksum the package manager lists for it (dpkg, package {package})",
    "pip": "the hash and size an installed Python distribution's RECORD lists for it ({package})",
    "bytecode": "a Python byte-code cache, rebuilt from its source ({package})",
}
TRUST = {"container-record": "a record in the container, which the agent can write"}
# Characters that change how text around them is shown without being seen themselves.
_HIDDEN = {"Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp"}


# The longest text shown of one path, name or note: the event bounds most fields, not every list item.
MAX_SHOWN = 4096


def visible(text: str | None) -> str:
    """`text` with every hiding or reordering character written out as `\\u202e` (and so on), cut to
    MAX_SHOWN characters (saying how many more there were)."""
    if not text:
        return ""
    shown = "".join(f"\\u{ord(c):04x}" if unicodedata.category(c) in _HIDDEN else c for c in text[:MAX_SHOWN])
    return shown if len(text) <= MAX_SHOWN else f"{shown}… ({len(text) - MAX_SHOWN} more characters)"


def policy_label(policy: str | None) -> str:
    return POLICIES.get(policy or "record", str(policy))


def integrity_view(evidence: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the attempt page shows; None when the attempt's environment recorded nothing."""
    if evidence is None:
        return None
    try:
        seen = AttemptIntegrity.model_validate(evidence)
    except ValidationError:
        # Stored events were valid when recorded: a shape this code cannot read is shown as unread.
        return {"checked": False, "policy": policy_label(None), "mode": None, "unreadable": True}
    changes = [_change(change) for change in seen.changes]
    return {
        "checked": seen.checked,
        "unreadable": False,
        "policy": policy_label(seen.policy),
        "policy_key": seen.policy,
        "mode": MODES.get(seen.verifier_mode, seen.verifier_mode),
        "changes": changes,
        "changes_total": max(seen.changes_total, len(changes)),
        "unexplained": max(seen.unexplained, sum(c["unexplained"] for c in changes)),
        "processes": [
            {"pid": p.pid, "name": visible(p.name), "command": visible(p.command)} for p in seen.processes
        ],
        "processes_total": max(seen.processes_total, len(seen.processes)),
        "writes": [visible(path) for path in seen.verifier_files_written],
        "note": visible(seen.note),
        "suspicious": seen.suspicious,
    }


def _change(change: ToolChainChange) -> dict[str, Any]:
    explained = change.explained_by
    return {
        "path": visible(change.path),
        "change": CHANGES[change.change],
        "before": _facts(change.before),
        "after": _facts(change.after),
        "explained": (
            EXPLAINED_BY[explained.source].format(package=visible(explained.package)) if explained else None
        ),
        "trust": TRUST.get(explained.trust, explained.trust) if explained else None,
        "unexplained": change.unexplained,
    }


def _facts(facts: FileFacts | None) -> dict[str, Any] | None:
    if facts is None:
        return None
    return {
        "kind": facts.kind,
        "size": facts.size,
        "sha256": facts.sha256,
        "owner": f"{facts.uid}:{facts.gid}",
        "mode": f"{facts.mode:04o}",
        "link": visible(facts.link) if facts.link else None,
    }
