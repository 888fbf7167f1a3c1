from .records import NewEvent, StoredEvent, new_event
from .store import EventStore, WrongExpectedVersion

__all__ = ["EventStore", "NewEvent", "StoredEvent", "WrongExpectedVersion", "new_event"]
