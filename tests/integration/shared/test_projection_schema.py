"""A read model whose schema changed is rebuilt from the log at start (ProjectionRunner.create_tables)."""

from __future__ import annotations

from regatta_shared.events import UserRegistered
from regatta_shared.events.envelope import StoredEvent
from regatta_shared.eventstore import EventStore, new_event
from regatta_shared.eventstore.projections import ProjectionRunner
from sqlalchemy import Column, Connection, Integer, MetaData, String, Table, insert, select


class Users:
    """Version 1 keeps names; version 2 adds a column, filled from the same events."""

    name = "schema-test"

    def __init__(self, version: int) -> None:
        self.metadata = MetaData()
        columns = [Column("id", String(64), primary_key=True), Column("name", String(100))]
        if version == 2:
            columns.append(Column("name_length", Integer))
        self.table = Table("rm_schema_test_users", self.metadata, *columns)
        self.version = version

    def apply(self, conn: Connection, event: StoredEvent) -> None:
        if event.type != "UserRegistered":
            return
        row = {"id": event.data["user_id"], "name": event.data["name"]}
        if self.version == 2:
            row["name_length"] = len(event.data["name"])
        conn.execute(insert(self.table).values(**row))


def _rows(store: EventStore, projection: Users) -> list[tuple[object, ...]]:
    with store.read_engine.connect() as conn:
        return sorted(tuple(r) for r in conn.execute(select(projection.table)))


def test_a_changed_read_model_schema_is_rebuilt_from_the_log(store: EventStore) -> None:
    for i, name in enumerate(["ada", "grace"]):
        event = UserRegistered(user_id=f"u{i}", email=f"{name}@x", name=name)
        store.append(f"user-u{i}", [new_event(event)])
    v1 = ProjectionRunner(store, Users(1))
    assert v1.create_tables(), "a first start builds the read models"
    assert v1.catch_up() == 2
    assert _rows(store, v1.projection) == [("u0", "ada"), ("u1", "grace")]

    again = ProjectionRunner(store, Users(1))
    assert not again.create_tables()  # same schema: kept as it is, nothing to replay
    assert again.catch_up() == 0

    v2 = ProjectionRunner(store, Users(2))
    assert v2.create_tables()
    assert store.checkpoint(v2.checkpoint_name) == 0
    assert _rows(store, v2.projection) == []
    assert v2.catch_up() == 2
    assert _rows(store, v2.projection) == [("u0", "ada", 3), ("u1", "grace", 5)]


def test_a_rebuild_records_the_schema_it_built(store: EventStore) -> None:
    store.append("user-u0", [new_event(UserRegistered(user_id="u0", email="a@x", name="ada"))])
    assert ProjectionRunner(store, Users(2)).rebuild() == 1
    started = ProjectionRunner(store, Users(2))
    assert not started.create_tables()  # as a service starting after `regatta projections rebuild`
    assert started.catch_up() == 0
    assert _rows(store, started.projection) == [("u0", "ada", 3)]
