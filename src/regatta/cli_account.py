"""`regatta secret …` and `regatta token …`: the signed-in user's secrets and API tokens."""

from __future__ import annotations

import os
from typing import Annotated, Any

import typer

from .cli_common import JsonOpt, console, folding_table, print_json
from .client import Client, Failure

secret = typer.Typer(no_args_is_help=True)
token = typer.Typer(no_args_is_help=True)
ScopeOpt = Annotated[str, typer.Option("--scope", help="personal or workspace")]


def _wire_scope(scope: str) -> str:
    if scope not in ("personal", "workspace"):
        raise typer.BadParameter("must be personal or workspace", param_hint="--scope")
    return "user" if scope == "personal" else "workspace"


@secret.command("set")
def secret_set(
    name: str,
    env: Annotated[
        str | None, typer.Option("--env", help="read the value from this environment variable")
    ] = None,
    scope: ScopeOpt = "personal",
) -> None:
    """Store a secret; the value comes from --env VAR or a hidden prompt, never from an argument."""
    value = os.environ.get(env, "") if env else typer.prompt(f"Value for {name}", hide_input=True)
    if not value:
        empty = f"no value: environment variable {env} is empty or unset"
        raise Failure(empty, code="VALIDATION", field="--env")
    Client().post("/secrets", json={"name": name, "value": value, "scope": _wire_scope(scope)})
    console.print(f'Secret "{name}" saved in {scope} scope.')


@secret.command("list")
def secret_list(
    scope: Annotated[str, typer.Option(help="all, personal or workspace")] = "all",
    as_json: JsonOpt = False,
) -> None:
    """Your secrets' names and scopes (never their values)."""
    wire = {"all": "all", "personal": "user", "workspace": "workspace"}.get(scope)
    if wire is None:
        raise typer.BadParameter("must be all, personal or workspace", param_hint="--scope")
    data = Client().get("/secrets", scope=wire, limit=50)
    if as_json:
        return print_json(data)
    table = folding_table("Name", "Scope", "Updated", "Updated by")
    for item in data["environment_secrets"]:
        kind = "personal" if item.get("scope") == "user" else item.get("scope", "")
        table.add_row(item["name"], kind, item.get("updated_at", ""), item.get("updater_name", ""))
    console.print(table)


@secret.command("delete")
def secret_delete(name: str, scope: ScopeOpt = "personal") -> None:
    """Delete a secret."""
    Client().request("DELETE", "/secrets", json={"name": name, "scope": _wire_scope(scope)})
    console.print(f'Secret "{name}" deleted from {scope} scope.')


@token.command("create")
def token_create(
    name: str,
    expires_at: Annotated[str | None, typer.Option(help="ISO-8601 expiry")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Create an API token; its value is printed once."""
    body: dict[str, Any] = {"name": name}
    if expires_at:
        body["expires_at"] = expires_at
    created = Client().post("/tokens", json=body)
    if as_json:
        return print_json(created)
    console.print(f"Token {created.get('id')} created. Value (shown once): {created.get('token')}")


@token.command("list")
def token_list(as_json: JsonOpt = False) -> None:
    """Your API tokens (never their values)."""
    data = Client().get("/tokens")
    if as_json:
        return print_json(data)
    table = folding_table("Id", "Name", "Created", "Expires", "Revoked")
    for item in data["tokens"]:
        table.add_row(
            item.get("id", ""),
            item.get("name", ""),
            str(item.get("created_at", "")),
            str(item.get("expires_at") or ""),
            str(item.get("revoked", False)),
        )
    console.print(table)


@token.command("revoke")
def token_revoke(token_id: str) -> None:
    """Revoke an API token: it stops working at once."""
    Client().request("DELETE", f"/tokens/{token_id}")
    console.print(f"Token {token_id} revoked.")
