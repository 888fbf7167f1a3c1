from .appends import WrongExpectedVersion
from .records import NewEvent, StoredEvent, new_event
from .store import EventStore

__all__ = ["EventStore", "NewEvent", "StoredEvent", "WrongExpectedVersion", "new_event"]
