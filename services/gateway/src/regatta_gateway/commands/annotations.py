"""Label an attempt, or take a label off: a member's judgement of a result ("reward hacking", "flaky
task", "infra"), recorded as events on the run's stream. Labels never change a score."""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from regatta_shared.events import AttemptLabelled, AttemptLabelRemoved
from regatta_shared.events.envelope import new_event
from regatta_shared.eventstore import EventStore
from regatta_shared.ids import new_id, run_stream
from regatta_shared.rules.attempt_labels import normal_label

from regatta_gateway.errors import Conflict, Invalid, NotFound
from regatta_gateway.principals import Scope
from regatta_gateway.queries.annotations import attempt_of_run, run_labels
from regatta_gateway.queries.benchmarks import find_run

# What the web form offers; any other label of the same shape is accepted.
SUGGESTED_LABELS = ("reward hacking", "flaky task", "infra", "needs review")
LABEL_MAX = 40
NOTE_MAX = 2000
LABELS_PER_ATTEMPT = 20
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9 _.-]*[a-z0-9])?")
_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def checked_label(value: Any) -> str:
    """A label as stored: lower case, single spaces, letters, digits, ' ', '-', '_' and '.'."""
    if not isinstance(value, str):
        raise _invalid("label", "must be a string such as \u201cflaky task\u201d")
    label = normal_label(value)
    if not label:
        raise _invalid("label", "must not be empty")
    if len(label) > LABEL_MAX:
        raise _invalid("label", f"is {len(label)} characters long; at most {LABEL_MAX}")
    if not label.isascii() or not _LABEL.fullmatch(label):
        raise _invalid("label", "may hold only letters a-z, digits, spaces, '-', '_' and '.'")
    return label


def checked_note(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _invalid("note", "must be a string")
    note = value.strip()
    if len(note) > NOTE_MAX:
        raise _invalid("note", f"is {len(note)} characters long; at most {NOTE_MAX}")
    # Notes are shown in pages and CSV cells: no control characters but line breaks and tabs.
    if any(unicodedata.category(c) == "Cc" and c not in "\n\t" for c in note):
        raise _invalid("note", "must not contain control characters")
    return note


def checked_id(value: str, field: str) -> str:
    if not _ID.fullmatch(value):
        raise _invalid(field, "is not an id of this run")
    return value


def label_attempt(
    store: EventStore, scope: Scope, run_key: str, attempt_id: str, label: Any, note: Any
) -> dict[str, Any]:
    run = find_run(store, scope, run_key)
    attempt_id = checked_id(attempt_id, "attempt_id")
    label, note = checked_label(label), checked_note(note)
    if not attempt_of_run(store, run["id"], attempt_id):
        message = f"Attempt {attempt_id!r} is not an attempt of run {run['name']!r}"
        raise NotFound(message, code="NOT_FOUND", field="attempt_id")
    existing = run_labels(store, run["id"], [attempt_id]).get(attempt_id, [])
    if any(found["label"] == label for found in existing):
        raise Conflict(
            f"Attempt {attempt_id} already has the label \u201c{label}\u201d",
            code="CONFLICT",
            field="label",
        )
    if len(existing) >= LABELS_PER_ATTEMPT:
        raise Conflict(
            f"Attempt {attempt_id} has {len(existing)} labels, the most it may have", code="CONFLICT"
        )
    labelled = AttemptLabelled(
        run_id=run["id"], attempt_id=attempt_id, label_id=new_id("lbl"), label=label, note=note
    )
    store.append(
        run_stream(run["id"]),
        [new_event(labelled, actor=scope.principal.user_id, workspace_id=scope.workspace_id)],
    )
    return {"id": labelled.label_id, "attempt_id": attempt_id, "label": label, "note": note}


def remove_label(store: EventStore, scope: Scope, run_key: str, attempt_id: str, label_id: str) -> None:
    run = find_run(store, scope, run_key)
    attempt_id, label_id = checked_id(attempt_id, "attempt_id"), checked_id(label_id, "label_id")
    labels = run_labels(store, run["id"], [attempt_id]).get(attempt_id, [])
    found = next((x for x in labels if x["id"] == label_id), None)
    if found is None:
        raise NotFound(f"Attempt {attempt_id} has no label {label_id!r}", code="NOT_FOUND")
    removed = AttemptLabelRemoved(
        run_id=run["id"], attempt_id=attempt_id, label_id=label_id, label=found["label"]
    )
    store.append(
        run_stream(run["id"]),
        [new_event(removed, actor=scope.principal.user_id, workspace_id=scope.workspace_id)],
    )


def _invalid(field: str, problem: str) -> Invalid:
    return Invalid(f"{field} {problem}", code="VALIDATION", field=field)
