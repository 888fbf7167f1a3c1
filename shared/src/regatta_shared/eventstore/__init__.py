from .appends import WrongExpectedVersion
from .limits import EventTooLarge
from .records import NewEvent, StoredEvent, new_event
from .store import EventStore

__all__ = ["EventStore", "EventTooLarge", "NewEvent", "StoredEvent", "WrongExpectedVersion", "new_event"]
