"""The secrets store: workspace and personal (`user`) secrets, encrypted at rest (invariant 6).

Values live only in `secret_values`, as AES-GCM ciphertext bound to (workspace, scope, owner, name), so
a row copied onto another record does not decrypt. The event log records names and scopes only
(`SecretSet` / `SecretDeleted`), appended in the same transaction as the ciphertext row. The table is
not a read model: a projection rebuild must never drop it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from regatta_shared.clock import isoformat, utcnow
from regatta_shared.events import SecretDeleted, SecretSet
from regatta_shared.eventstore import EventStore
from regatta_shared.ids import new_id
from regatta_shared.security import run_keys
from regatta_shared.security.sealing import SealError, decrypt, encrypt
from sqlalchemy import (
    Column,
    Connection,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    and_,
    delete,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError

from regatta_gateway.errors import Broken, Forbidden, Invalid, NotFound
from regatta_gateway.principals import Scope
from regatta_gateway.queries.benchmarks import page
from regatta_gateway.readmodels import tables as t
from regatta_gateway.secrets.names import SECRET_NAME
from regatta_gateway.workspaces import aggregate as ws
from regatta_gateway.workspaces import records
from regatta_gateway.workspaces.appends import execute

SCOPES = ("workspace", "user")
MAX_VALUE_LENGTH = 64 * 1024

metadata = MetaData()
secret_values = Table(
    "secret_values",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("workspace_id", String(64), nullable=False),
    Column("scope", String(20), nullable=False),
    Column("owner", String(64), nullable=False),  # the user id for `user` secrets, "" for workspace ones
    Column("name", String(255), nullable=False),
    Column("ciphertext", Text, nullable=False),
    Column("updated_at", String(40), nullable=False),
    UniqueConstraint("workspace_id", "scope", "owner", "name", name="uq_secret_values_record"),
)


@dataclass(frozen=True)
class SecretVault:
    events: EventStore
    key: bytes  # secrets at rest
    sealing_key: bytes  # wraps each run's data key (regatta_shared.security.run_keys)

    def create_tables(self) -> None:
        self.events.create_tables(metadata)
        run_keys.create_table(self.events)


def _owner(scope: Scope, kind: str) -> str:
    return scope.principal.user_id if kind == "user" else ""


def _record(scope: Scope, kind: str, name: str) -> Any:
    return and_(
        secret_values.c.workspace_id == scope.workspace_id,
        secret_values.c.scope == kind,
        secret_values.c.owner == _owner(scope, kind),
        secret_values.c.name == name,
    )


def _bound_to(workspace_id: str, kind: str, owner: str, name: str) -> bytes:
    return "\x1f".join((workspace_id, kind, owner, name)).encode()


def validate_secret(name: Any, value: Any, kind: Any, *, with_value: bool = True) -> tuple[str, str, str]:
    """Checks a write (`with_value`) or a delete; messages never echo the value."""
    if not isinstance(name, str) or not 1 <= len(name) <= 255 or not SECRET_NAME.match(name):
        raise Invalid("name must match ^[A-Z][A-Z0-9_]*$ (1-255 characters)", code="VALIDATION", field="name")
    if kind not in SCOPES:
        raise Invalid("scope must be 'user' or 'workspace'", code="VALIDATION", field="scope")
    if with_value and (not isinstance(value, str) or not value or len(value) > MAX_VALUE_LENGTH):
        raise Invalid(
            f"value must be a non-empty string of at most {MAX_VALUE_LENGTH} characters",
            code="VALIDATION",
            field="value",
        )
    return name, value or "", kind


def _require_writer(scope: Scope, kind: str) -> None:
    if kind == "workspace" and not scope.is_admin:
        raise Forbidden("Only workspace admins can change workspace secrets", code="FORBIDDEN", field="scope")


def set_secret(vault: SecretVault, scope: Scope, name: str, value: str, kind: str) -> str:
    """Upsert; returns the secret's id. The id stays the same across updates of one record."""
    _require_writer(scope, kind)
    try:
        return _upsert(vault, scope, name, value, kind)
    except IntegrityError:
        # A concurrent first write of the same record committed first: this one becomes an update.
        return _upsert(vault, scope, name, value, kind)


def _upsert(vault: SecretVault, scope: Scope, name: str, value: str, kind: str) -> str:
    owner = _owner(scope, kind)
    where = _record(scope, kind, name)
    ciphertext = encrypt(value.encode(), vault.key, _bound_to(scope.workspace_id, kind, owner, name))
    now = isoformat(utcnow()) or ""
    with vault.events.transaction() as conn:
        existing = conn.execute(select(secret_values.c.id).where(where)).scalar_one_or_none()
        secret_id = existing or new_id("sec")
        if existing:
            conn.execute(update(secret_values).where(where).values(ciphertext=ciphertext, updated_at=now))
        else:
            conn.execute(
                insert(secret_values).values(
                    id=secret_id,
                    workspace_id=scope.workspace_id,
                    scope=kind,
                    owner=owner,
                    name=name,
                    ciphertext=ciphertext,
                    updated_at=now,
                )
            )
        recorded = SecretSet(
            secret_id=secret_id,
            workspace_id=scope.workspace_id,
            name=name,
            scope=kind,  # type: ignore[arg-type]
            owner_user_id=owner or None,
        )
        _append(vault, scope, recorded, conn)
    return secret_id


def _append(vault: SecretVault, scope: Scope, event: SecretSet | SecretDeleted, conn: Connection) -> None:
    actor = scope.principal.user_id
    execute(
        vault.events,
        scope.workspace_id,
        actor,
        lambda state: records.decide_secret(state, actor, event),
        reads=ws.standing(actor),
        conn=conn,
    )


def delete_secret(vault: SecretVault, scope: Scope, name: str, kind: str) -> None:
    _require_writer(scope, kind)
    where = _record(scope, kind, name)
    with vault.events.transaction() as conn:
        secret_id = conn.execute(select(secret_values.c.id).where(where)).scalar_one_or_none()
        if secret_id is None:
            label = "personal" if kind == "user" else "workspace"
            raise NotFound(f'Secret "{name}" not found in {label} scope', code="NOT_FOUND", field="name")
        conn.execute(delete(secret_values).where(secret_values.c.id == secret_id))
        deleted = SecretDeleted(
            secret_id=secret_id,
            workspace_id=scope.workspace_id,
            name=name,
            scope=kind,  # type: ignore[arg-type]
        )
        _append(vault, scope, deleted, conn)


def resolve_secrets(
    vault: SecretVault, scope: Scope, names: list[str]
) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """Values, where each came from ("workspace" | "user" | "user_override"), and the names not found.

    A personal record overrides the workspace record of the same name.
    """
    if not names:
        return {}, {}, []
    with vault.events.read_engine.connect() as conn:
        rows = (
            conn.execute(
                select(secret_values).where(
                    secret_values.c.workspace_id == scope.workspace_id,
                    secret_values.c.name.in_(names),
                    or_(
                        secret_values.c.scope == "workspace",
                        and_(
                            secret_values.c.scope == "user", secret_values.c.owner == scope.principal.user_id
                        ),
                    ),
                )
            )
            .mappings()
            .all()
        )
    found: dict[str, dict[str, Any]] = {}
    for row in rows:
        found.setdefault(row["name"], {})[row["scope"]] = row
    values: dict[str, str] = {}
    scopes: dict[str, str] = {}
    for name in names:
        records = found.get(name)
        if not records:
            continue
        row = records.get("user") or records["workspace"]
        bound = _bound_to(row["workspace_id"], row["scope"], row["owner"], row["name"])
        try:
            values[name] = decrypt(row["ciphertext"], vault.key, bound).decode()
        except SealError:
            raise Broken(
                f"Stored secret {name} cannot be decrypted; was REGATTA_MASTER_KEY changed?",
                code="SECRET_UNREADABLE",
            ) from None
        if "user" in records:
            scopes[name] = "user_override" if "workspace" in records else "user"
        else:
            scopes[name] = "workspace"
    missing = [name for name in dict.fromkeys(names) if name not in values]
    return values, scopes, missing


def secret_item(row: dict[str, Any]) -> dict[str, Any]:
    """The contract's EnvironmentSecretInfo (§4.11): metadata only, never a value."""
    item = {
        k: row[k] for k in ("id", "name", "scope", "created_at", "updated_at", "creator_name", "updater_name")
    }
    return {k: v for k, v in item.items() if v is not None}


def _visible(scope: Scope, kind: str) -> Any:
    mine = and_(t.secrets.c.scope == "user", t.secrets.c.owner_user_id == scope.principal.user_id)
    shared = t.secrets.c.scope == "workspace"
    chosen = {"all": or_(shared, mine), "workspace": shared, "user": mine}
    if kind not in chosen:
        raise Invalid("scope must be all, workspace or user", code="VALIDATION", field="scope")
    return and_(t.secrets.c.workspace_id == scope.workspace_id, chosen[kind])


def list_secrets(store: EventStore, scope: Scope, kind: str, limit: int, offset: int) -> dict[str, Any]:
    where = _visible(scope, kind)
    with store.read_engine.connect() as conn:
        total = conn.execute(select(func.count()).select_from(t.secrets).where(where)).scalar_one()
        rows = (
            conn.execute(
                select(t.secrets)
                .where(where)
                .order_by(t.secrets.c.name, t.secrets.c.scope, t.secrets.c.id)
                .limit(limit)
                .offset(offset)
            )
            .mappings()
            .all()
        )
    return page("environment_secrets", [secret_item(dict(r)) for r in rows], total, limit, offset)


def find_secret(store: EventStore, scope: Scope, secret_id: str) -> dict[str, Any]:
    with store.read_engine.connect() as conn:
        row = (
            conn.execute(select(t.secrets).where(_visible(scope, "all"), t.secrets.c.id == secret_id))
            .mappings()
            .first()
        )
    if row is None:
        raise NotFound("Secret not found", code="NOT_FOUND")
    return secret_item(dict(row))
