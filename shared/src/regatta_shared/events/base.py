"""The event base class, the registry of event types by their stored name, and upcasting.

An event type's shape may change after events of it were stored. The type then raises its
`schema_version` and adds an upcaster from the previous version: a function from the stored payload
(a plain dict) to the next version's. Readers (the codec) upcast every stored payload before anything
looks at it, so handlers, projections and aggregates only ever see the current shape, and validation
stays strict (extra="forbid") for it. Stored events are never rewritten.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

EVENT_TYPES: dict[str, type[Event]] = {}
# The envelope metadata key naming the payload's schema version; absent means version 1.
SCHEMA_VERSION = "schema_version"

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]


class Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    type_name: ClassVar[str]
    category: ClassVar[str]
    # Raised by one whenever stored payloads of the previous shape would be refused or misread.
    schema_version: ClassVar[int] = 1
    # upcasters[n] turns a version-n payload into a version n+1 payload; one for each n < schema_version.
    upcasters: ClassVar[Mapping[int, Upcaster]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "type_name" in cls.__dict__:
            if cls.type_name in EVENT_TYPES:
                raise TypeError(f"duplicate event type {cls.type_name}")
            missing = set(range(1, cls.schema_version)) ^ set(cls.upcasters)
            if missing:
                raise TypeError(
                    f"{cls.type_name} is at schema version {cls.schema_version}: it needs exactly one "
                    f"upcaster from each earlier version (wrong or missing: {sorted(missing)})"
                )
            EVENT_TYPES[cls.type_name] = cls


def parse_event(type_name: str, data: dict[str, Any]) -> Event:
    try:
        model = EVENT_TYPES[type_name]
    except KeyError:
        raise ValueError(f"unknown event type {type_name!r}") from None
    return model.model_validate(data)


def upcast(type_name: str, data: dict[str, Any], version: int) -> dict[str, Any]:
    """A payload stored at schema `version`, in its type's current shape. Unknown types and versions
    newer than this code knows pass unchanged, to be refused by `parse_event` where they are read."""
    model = EVENT_TYPES.get(type_name)
    if model is None or version >= model.schema_version:
        return data
    for step in range(max(version, 1), model.schema_version):
        # A shallow copy each step: an upcaster may set keys of the dict it gets, never edit a nested
        # value in place (it replaces it), so the stored payload the caller holds stays as it was.
        data = model.upcasters[step](dict(data))
    return data
