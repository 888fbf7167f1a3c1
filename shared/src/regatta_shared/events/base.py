"""The event base class and the registry of event types by their stored name."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

EVENT_TYPES: dict[str, type[Event]] = {}


class Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    type_name: ClassVar[str]
    category: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "type_name" in cls.__dict__:
            if cls.type_name in EVENT_TYPES:
                raise TypeError(f"duplicate event type {cls.type_name}")
            EVENT_TYPES[cls.type_name] = cls


def parse_event(type_name: str, data: dict[str, Any]) -> Event:
    try:
        model = EVENT_TYPES[type_name]
    except KeyError:
        raise ValueError(f"unknown event type {type_name!r}") from None
    return model.model_validate(data)
