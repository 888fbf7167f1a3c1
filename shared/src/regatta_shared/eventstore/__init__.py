from regatta_shared.events.envelope import NewEvent, StoredEvent, new_event

from .appends import WrongExpectedVersion
from .limits import EventTooLarge
from .store import EventStore

__all__ = ["EventStore", "EventTooLarge", "NewEvent", "StoredEvent", "WrongExpectedVersion", "new_event"]
