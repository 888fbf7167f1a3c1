"""`regatta workspace …`: the workspaces you belong to, new workspaces and their members."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

import typer
from rich.table import Table

from .cli_common import JsonOpt, console, print_json
from .client import Client

workspace = typer.Typer(no_args_is_help=True)


@workspace.command("list")
def workspace_list(as_json: JsonOpt = False) -> None:
    """The workspaces you belong to; * marks the one commands act in (see --workspace)."""
    data = Client().get("/workspaces")
    if as_json:
        return print_json(data)
    table = Table("", "Name", "Id", "Role")
    for item in data["workspaces"]:
        table.add_row("*" if item["current"] else "", item["name"], item["id"], item["role"])
    console.print(table)


@workspace.command("create")
def workspace_create(name: str, as_json: JsonOpt = False) -> None:
    """Create a workspace (admins only); you become its admin."""
    created = Client().post("/workspaces", json={"name": name})
    if as_json:
        return print_json(created)
    console.print(f"Workspace {created['name']!r} created ({created['id']}).")
    console.print(f"Act in it with: regatta --workspace {created['name']} …")


@workspace.command("members")
def workspace_members(
    name: Annotated[str, typer.Argument(help="workspace name or id")], as_json: JsonOpt = False
) -> None:
    """Who belongs to a workspace you are in, and their roles."""
    data = Client().get(f"/workspaces/{quote(name, safe='')}/members")
    if as_json:
        return print_json(data)
    table = Table("Email", "Name", "Role")
    for item in data["members"]:
        table.add_row(item["email"], item["name"], item["role"])
    console.print(table)


@workspace.command("add-member")
def workspace_add_member(
    name: Annotated[str, typer.Argument(help="workspace name or id")],
    email: str,
    role: Annotated[str, typer.Option(help="member or admin")] = "member",
    issue_token: Annotated[
        bool, typer.Option(help="also issue the member an API token (platform administrators only)")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Add a user by email (created if new) to a workspace you administer."""
    body = {"email": email, "role": role, "issue_token": issue_token}
    added = Client().post(f"/workspaces/{quote(name, safe='')}/members", json=body)
    if as_json:
        return print_json(added)
    console.print(f"{added['email']} is now {added['role']} of {name}.")
    if added.get("token"):
        console.print(f"Their API token (shown once): {added['token']}")


@workspace.command("grant-platform-admin")
def workspace_grant_platform_admin(email: str, as_json: JsonOpt = False) -> None:
    """Make an existing user a platform administrator (you must be one): they may issue tokens to other
    users and add host folders or local repositories outside REGATTA_SOURCE_ROOTS."""
    granted = Client().post("/platform/admins", json={"email": email})
    if as_json:
        return print_json(granted)
    console.print(f"{granted['email']} is now a platform administrator.")
