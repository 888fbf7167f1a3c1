"""The AsyncAPI 3.0 document of Regatta's bus: every JetStream stream, subject and message schema, made
from the event classes (their pydantic JSON schemas) and the layout in bus.py. Consumers outside the
platform (audit, notifications) read it to decode what the relay publishes; docs/asyncapi.json is the
committed copy (`python -m regatta_shared.messaging.asyncapi docs/asyncapi.json` rewrites it, and a test
checks it).
"""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from regatta_shared import events as _events
from regatta_shared.events import EVENT_TYPES, Event
from regatta_shared.messaging.bus import (
    CANCEL_SUBJECT_PREFIX,
    CLAIM_SUBJECT_PREFIX,
    EVENTS_STREAM,
    JOB_SUBJECT,
    JOBS_STREAM,
    REPORT_SUBJECT,
    REPORTS_STREAM,
    subject_of,
)
from regatta_shared.messaging.jobs import AttemptJob, AttemptReport
from regatta_shared.messaging.live import LIVE_STREAM, LIVE_SUBJECT_PREFIX, WATCH_SUBJECT_PREFIX, LiveChunk
from regatta_shared.messaging.nudge import NUDGE_SUBJECT

SCHEMAS = "#/components/schemas/"
ENVELOPE = "StoredEventEnvelope"


def event_classes() -> list[type[Event]]:
    """The platform's event types (regatta_shared.events), by subject; types defined elsewhere (tests)
    are not contracts."""
    package = _events.__name__ + "."
    return sorted((cls for cls in EVENT_TYPES.values() if cls.__module__.startswith(package)), key=subject_of)


def work_queue_messages() -> dict[str, tuple[str, str, type[BaseModel]]]:
    """Message name → (stream, subject, payload model) of the scheduler's and executors' work queues."""
    return {
        "AttemptJob": (JOBS_STREAM, JOB_SUBJECT, AttemptJob),
        "AttemptReport": (REPORTS_STREAM, REPORT_SUBJECT, AttemptReport),
    }


RUN_ID = {"description": "the run's id (a plain token: letters, digits, - and _)"}
ATTEMPT_ID = {"description": "the attempt's id (a plain token)"}


def core_messages() -> dict[str, dict[str, Any]]:
    """Message name → channel and payload of the subjects outside the work queues and the event log:
    hints and live output, with no delivery guarantee (a lost one costs a poll interval, or a chunk a
    watcher does not see; the facts are in the event log)."""
    return {
        "LiveChunk": {
            "address": f"{LIVE_SUBJECT_PREFIX}.{{run_id}}.{{attempt_id}}",
            "parameters": {"run_id": RUN_ID, "attempt_id": ATTEMPT_ID},
            "x-stream": LIVE_STREAM,
            "description": "An executor's bounded, redacted live output of a running attempt (live.py); "
            "the LIVE stream keeps recent chunks in memory for late watchers.",
            "payload": {"$ref": SCHEMAS + LiveChunk.__name__},
        },
        "AttemptWatched": {
            "address": f"{WATCH_SUBJECT_PREFIX}.{{run_id}}.{{attempt_id}}",
            "parameters": {"run_id": RUN_ID, "attempt_id": ATTEMPT_ID},
            "description": "Core NATS, never stored: the gateway says someone watches the attempt's live "
            "output (when a watcher opens it and every few seconds while it stays open); an environment "
            "whose output costs engine round trips to read (the container's) reads it only then.",
            "payload": {"type": "string", "const": ""},
        },
        "RunCancelAnnounced": {
            "address": f"{CANCEL_SUBJECT_PREFIX}.{{run_id}}",
            "parameters": {"run_id": RUN_ID},
            "description": "Core NATS: the run scheduler tells every executor to cancel the run's "
            "running attempts (the stop itself is the RunStopRequested event).",
            "payload": {"type": "string", "const": "stopped"},
        },
        "AttemptClaimed": {
            "address": f"{CLAIM_SUBJECT_PREFIX}.{{run_id}}",
            "parameters": {"run_id": RUN_ID},
            "description": "Core NATS: an executor took an attempt of the run; a stop waits for its sandbox. "
            "The payload is the attempt id, signed in the message headers with the job's sealing key.",
            "payload": {"type": "string", "maxLength": 200},
        },
        "StoreCommitted": {
            "address": NUDGE_SUBJECT,
            "description": "Core NATS: a writer committed to the event store; wakes the relay and the "
            "projections before their next poll (nudge.py).",
            "payload": {"type": "string", "maxLength": 0},
        },
    }


def _summary(model: type[BaseModel]) -> str | None:
    doc = model.__dict__.get("__doc__")
    return inspect.cleandoc(doc).split("\n\n", 1)[0].replace("\n", " ") if doc else None


def _envelope() -> dict[str, Any]:
    """What the relay publishes for a stored event (codec.encode_stored): the payload is `data`."""
    return {
        "type": "object",
        "description": "A stored event as the relay publishes it; `data` is in its type's current shape "
        "once upcast (events/base.py): metadata.schema_version names the shape it was stored in.",
        "required": [
            "position",
            "event_id",
            "stream_id",
            "version",
            "type",
            "data",
            "metadata",
            "recorded_at",
        ],
        "properties": {
            "position": {"type": "integer", "description": "global position in the event log"},
            "event_id": {"type": "string", "description": "also the Nats-Msg-Id header"},
            "stream_id": {"type": "string", "description": "the event's stream in the log, e.g. run-<id>"},
            "version": {"type": "integer", "description": "position within stream_id"},
            "type": {"type": "string"},
            "data": {"type": "object"},
            "metadata": {
                "type": "object",
                "description": "actor, workspace_id, causation_id; schema_version when above 1",
            },
            "recorded_at": {"type": "string", "format": "date-time"},
        },
    }


def asyncapi_document() -> dict[str, Any]:
    events = event_classes()
    queues = work_queue_messages()
    models: list[type[BaseModel]] = [*events, *(model for _, _, model in queues.values()), LiveChunk]
    _, definitions = models_json_schema(
        [(model, "validation") for model in models], ref_template=SCHEMAS + "{model}"
    )
    schemas: dict[str, Any] = {ENVELOPE: _envelope(), **definitions.get("$defs", {})}
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    messages: dict[str, Any] = {}
    for cls in events:
        name = cls.type_name
        channels[name] = {
            "address": subject_of(cls),
            "x-stream": EVENTS_STREAM,
            "messages": {name: {"$ref": f"#/components/messages/{name}"}},
        }
        messages[name] = {
            "name": name,
            "title": name,
            **({"summary": summary} if (summary := _summary(cls)) else {}),
            "contentType": "application/json",
            "payload": {
                "allOf": [
                    {"$ref": SCHEMAS + ENVELOPE},
                    {
                        "type": "object",
                        "properties": {"type": {"const": name}, "data": {"$ref": SCHEMAS + cls.__name__}},
                    },
                ]
            },
            "x-event-category": cls.category,
            "x-schema-version": cls.schema_version,
        }
    for name, (stream, subject, model) in queues.items():
        channels[name] = {
            "address": subject,
            "x-stream": stream,
            "messages": {name: {"$ref": f"#/components/messages/{name}"}},
        }
        messages[name] = {
            "name": name,
            "title": name,
            "contentType": "application/json",
            "payload": {"$ref": SCHEMAS + model.__name__},
        }
    for name, core in core_messages().items():
        channels[name] = {
            "address": core["address"],
            **({"parameters": core["parameters"]} if "parameters" in core else {}),
            **({"x-stream": core["x-stream"]} if "x-stream" in core else {}),
            "description": core["description"],
            "messages": {name: {"$ref": f"#/components/messages/{name}"}},
        }
        messages[name] = {
            "name": name,
            "title": name,
            "contentType": "application/json" if name == "LiveChunk" else "text/plain",
            "payload": core["payload"],
        }
    for name in channels:
        operations[f"send{name}"] = {
            "action": "send",
            "channel": {"$ref": f"#/channels/{name}"},
            "messages": [{"$ref": f"#/channels/{name}/messages/{name}"}],
        }
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "Regatta event contracts",
            "version": "1.0.0",
            "description": "Every JetStream stream, subject and message of Regatta's NATS bus. Events "
            f"({EVENTS_STREAM}, subjects evt.<category>.<type>) are published by the relay from the event "
            f"log; {JOBS_STREAM} and {REPORTS_STREAM} are the work queues between the run scheduler and "
            f"the executors; {LIVE_STREAM} keeps running attempts' live output; the core NATS subjects "
            "carry hints with no delivery guarantee (cancel, claims, store commits).",
        },
        "defaultContentType": "application/json",
        "servers": {"nats": {"host": "localhost:4222", "protocol": "nats"}},
        "channels": channels,
        "operations": operations,
        "components": {"schemas": schemas, "messages": messages},
    }


def render() -> str:
    return json.dumps(asyncapi_document(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else None
    if target:
        Path(target).write_text(render())
    else:
        sys.stdout.write(render())
