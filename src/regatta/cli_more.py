"""`regatta secret …`, `regatta token …` and `regatta run download`: the CLI's account and output commands."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from rich.table import Table

from .client import ApiFailure, Client

secret = typer.Typer(no_args_is_help=True)
token = typer.Typer(no_args_is_help=True)
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON")]
ScopeOpt = Annotated[str, typer.Option("--scope", help="personal or workspace")]


def _fail(console: Any, error: ApiFailure) -> None:
    console.print(f"[red]Error:[/red] {error}")
    raise typer.Exit(1)


def _wire_scope(scope: str) -> str:
    if scope not in ("personal", "workspace"):
        raise typer.BadParameter("must be personal or workspace", param_hint="--scope")
    return "user" if scope == "personal" else "workspace"


def register(app: typer.Typer, run: typer.Typer, console: Any) -> None:
    app.add_typer(secret, name="secret", help="Secret records (values are never shown)")
    app.add_typer(token, name="token", help="API tokens")

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
            console.print(f"[red]Error:[/red] no value: environment variable {env} is empty or unset")
            raise typer.Exit(1)
        try:
            Client().post("/secrets", json={"name": name, "value": value, "scope": _wire_scope(scope)})
        except ApiFailure as error:
            _fail(console, error)
        console.print(f'Secret "{name}" saved in {scope} scope.')

    @secret.command("list")
    def secret_list(
        scope: Annotated[str, typer.Option(help="all, personal or workspace")] = "all",
        as_json: JsonOpt = False,
    ) -> None:
        wire = {"all": "all", "personal": "user", "workspace": "workspace"}.get(scope)
        if wire is None:
            raise typer.BadParameter("must be all, personal or workspace", param_hint="--scope")
        try:
            data = Client().get("/secrets", scope=wire, limit=50)
        except ApiFailure as error:
            _fail(console, error)
        if as_json:
            return typer.echo(json.dumps(data, indent=2))
        table = Table("Name", "Scope", "Updated", "Updated by")
        for item in data["environment_secrets"]:
            kind = "personal" if item.get("scope") == "user" else item.get("scope", "")
            table.add_row(item["name"], kind, item.get("updated_at", ""), item.get("updater_name", ""))
        console.print(table)

    @secret.command("delete")
    def secret_delete(name: str, scope: ScopeOpt = "personal") -> None:
        try:
            Client().request("DELETE", "/secrets", json={"name": name, "scope": _wire_scope(scope)})
        except ApiFailure as error:
            _fail(console, error)
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
        try:
            created = Client().post("/tokens", json=body)
        except ApiFailure as error:
            _fail(console, error)
        if as_json:
            return typer.echo(json.dumps(created, indent=2))
        console.print(f"Token {created.get('id')} created. Value (shown once): {created.get('token')}")

    @token.command("list")
    def token_list(as_json: JsonOpt = False) -> None:
        try:
            data = Client().get("/tokens")
        except ApiFailure as error:
            _fail(console, error)
        if as_json:
            return typer.echo(json.dumps(data, indent=2))
        table = Table("Id", "Name", "Created", "Expires", "Revoked")
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
        try:
            Client().request("DELETE", f"/tokens/{token_id}")
        except ApiFailure as error:
            _fail(console, error)
        console.print(f"Token {token_id} revoked.")

    @run.command("download")
    def run_download(
        key: str,
        output: Annotated[Path, typer.Option("-o", "--output", help="folder to write into")] = Path("."),
        types: Annotated[str, typer.Option(help="summary,results,logs,artifacts or all")] = "summary,results",
        as_json: JsonOpt = False,
    ) -> None:
        """Download summary.csv, results.csv, logs.txt and artifacts of a run (a running run: a snapshot)."""
        wanted = "summary,results,artifacts,logs" if types == "all" else types
        try:
            manifest = Client().get(f"/runs/{key}/downloads", types=wanted)
        except ApiFailure as error:
            _fail(console, error)
        written = []
        root = output.expanduser().resolve()
        for item in manifest["files"]:
            target = (root / item["path"]).resolve()
            if root not in target.parents:
                console.print(f"[red]Refusing[/red] {item['path']}: outside {root}")
                raise typer.Exit(1)
            target.parent.mkdir(parents=True, exist_ok=True)
            response = httpx.get(item["url"], timeout=120)
            if response.status_code != 200 or len(response.content) != item["size"]:
                console.print(f"[red]Failed[/red] {item['path']}: HTTP {response.status_code}")
                raise typer.Exit(1)
            target.write_bytes(response.content)
            written.append({"path": item["path"], "size": item["size"]})
        if as_json:
            return typer.echo(json.dumps({"files": written, "root": str(root)}, indent=2))
        console.print(f"Downloaded {len(written)} files to {root}")
