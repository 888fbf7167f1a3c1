"""`regatta workspace …`: the workspaces you belong to, new workspaces and their members."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

import typer

from .cli_common import JsonOpt, console, folding_table, print_json
from .client import Client

workspace = typer.Typer(no_args_is_help=True)


@workspace.command("list")
def workspace_list(as_json: JsonOpt = False) -> None:
    """The workspaces you belong to; * marks the one commands act in (see --workspace)."""
    data = Client().get("/workspaces")
    if as_json:
        return print_json(data)
    table = folding_table("", "Name", "Id", "Role")
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
    table = folding_table("Email", "Name", "Role")
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


@workspace.command("rename")
def workspace_rename(
    name: Annotated[str, typer.Argument(help="workspace name or id")], new_name: str, as_json: JsonOpt = False
) -> None:
    """Rename a workspace you administer; names are unique."""
    renamed = Client().request("PATCH", f"/workspaces/{quote(name, safe='')}", json={"name": new_name})
    if as_json:
        return print_json(renamed)
    console.print(f"Workspace {name!r} is now {renamed['name']!r}.")


@workspace.command("delete")
def workspace_delete(
    name: Annotated[str, typer.Argument(help="workspace name or id")],
    confirm: Annotated[
        str | None, typer.Option(help="the workspace's name again: required when it has runs")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Delete a workspace you administer for every member (active runs are stopped; the event log keeps
    everything it recorded)."""
    params = {"confirm": confirm} if confirm else {}
    deleted = Client().request("DELETE", f"/workspaces/{quote(name, safe='')}", params=params)
    if as_json:
        return print_json(deleted)
    console.print(f"Workspace {deleted['name']!r} deleted ({deleted['stopped_runs']} active runs stopped).")


def _member_path(name: str, email: str) -> str:
    """The members path of `email` in workspace `name` (the API names members by user id)."""
    client = Client()
    members = client.get(f"/workspaces/{quote(name, safe='')}/members")["members"]
    found = next((m for m in members if m["email"].lower() == email.lower()), None)
    if found is None:
        raise typer.BadParameter(f"{email} is not a member of {name}", param_hint="EMAIL")
    return f"/workspaces/{quote(name, safe='')}/members/{quote(found['user_id'], safe='')}"


@workspace.command("remove-member")
def workspace_remove_member(
    name: Annotated[str, typer.Argument(help="workspace name or id")], email: str
) -> None:
    """Remove someone from a workspace you administer (or yourself: leave it)."""
    Client().request("DELETE", _member_path(name, email))
    console.print(f"{email} removed from {name}.")


@workspace.command("set-role")
def workspace_set_role(
    name: Annotated[str, typer.Argument(help="workspace name or id")],
    email: str,
    role: Annotated[str, typer.Argument(help="member or admin")],
    as_json: JsonOpt = False,
) -> None:
    """Make a member an admin or an admin a member (a workspace keeps at least one admin)."""
    changed = Client().request("PATCH", _member_path(name, email), json={"role": role})
    if as_json:
        return print_json(changed)
    console.print(f"{email} is now {changed['role']} of {name}.")
