"""A small HTTP client for `/api/v1`, used by the `regatta` CLI."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import httpx


class Failure(Exception):
    """A command's failure as the user sees it: a message, a machine `code`, the `field` at fault (if one
    is), and for an API answer its HTTP `status` and the server's `issues`."""

    def __init__(
        self,
        message: str,
        *,
        code: str = "ERROR",
        field: str | None = None,
        status: int | None = None,
        issues: list[Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.field = field
        self.status = status
        self.issues = issues or []

    def text(self) -> str:
        """The message, then each issue on a line of its own unless the message already says it (the
        server's message often quotes its first issue: shown twice, it reads as two problems)."""
        lines = [self.message]
        for issue in self.issues:
            if not isinstance(issue, dict):
                line = f"  - {issue}"
            else:
                where = f" (line {issue['line']})" if issue.get("line") else ""
                said = f"{issue.get('key')}: {issue.get('message')}"
                if not where and said in self.message:
                    continue
                line = f"  - {issue.get('key')}{where}: {issue.get('message')}"
            lines.append(line)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()

    def as_json(self) -> dict[str, Any]:
        shown: dict[str, Any] = {"code": self.code, "message": self.message, "field": self.field}
        if self.status is not None:
            shown["status"] = self.status
        if self.issues:
            shown["issues"] = self.issues
        return {"error": shown}


class ApiFailure(Failure):
    """The gateway refused a request, or could not be reached."""


DEFAULT_URL = "http://127.0.0.1:8000"


def _stacks_dir() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "regatta" / "stacks"


def _stack_entry(url: str) -> Path:
    return _stacks_dir() / hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:32]


def register_stack(url: str, token_file: Path) -> None:
    """Note, for this user's CLI, where the token of the embedded stack at `url` is: `regatta up
    --data-dir X --port P` then needs no REGATTA_DATA_DIR in every other terminal. The entry holds the
    file's path, not the token."""
    entry = _stack_entry(url)
    entry.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    partial = entry.with_suffix(".part")
    partial.write_text(str(token_file.resolve()))
    partial.chmod(0o600)
    partial.replace(entry)


def forget_stack(url: str) -> None:
    _stack_entry(url).unlink(missing_ok=True)


def token_places(url: str) -> list[Path]:
    """Where the CLI looks for the token of the gateway at `url`, in order."""
    places = []
    if os.environ.get("REGATTA_DATA_DIR"):
        places.append(Path(os.environ["REGATTA_DATA_DIR"]) / "token")
    entry = _stack_entry(url)
    if entry.is_file():
        places.append(Path(entry.read_text().strip()))
    places.append(Path(".regatta") / "token")
    return places


def default_token(url: str = DEFAULT_URL) -> str | None:
    if os.environ.get("REGATTA_TOKEN"):
        return os.environ["REGATTA_TOKEN"]
    for path in token_places(url):
        if path.is_file():
            return path.read_text().strip()
    return os.environ.get("REGATTA_BOOTSTRAP_TOKEN")


# The workspace every request of this process acts in: `regatta --workspace NAME …` (or REGATTA_WORKSPACE).
# Unset, the server takes the user's default workspace (the first one they were given).
_workspace: str | None = None


def select_workspace(name: str | None) -> None:
    global _workspace
    _workspace = name.strip() if name and name.strip() else None


class Client:
    def __init__(self, url: str | None = None, token: str | None = None) -> None:
        self.url = (url or os.environ.get("REGATTA_URL") or DEFAULT_URL).rstrip("/")
        token = token or default_token(self.url)
        self.has_token = bool(token)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if _workspace:
            headers["X-Regatta-Workspace"] = _workspace
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=30.0)

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self.http.request(method, f"/api/v1{path}", **kwargs)
        except httpx.TransportError as error:
            raise ApiFailure(
                f"Could not connect to Regatta at {self.url}: {error}", code="CONNECTION_FAILED"
            ) from None
        if response.status_code == 401 and not self.has_token:
            looked = ", ".join(str(p) for p in token_places(self.url))
            raise ApiFailure(
                f"No API token for {self.url}: set REGATTA_TOKEN, or REGATTA_DATA_DIR to the stack's data "
                f"folder (`regatta up --data-dir`), whose token is DATA_DIR/token (looked in: {looked})",
                code="AUTH_REQUIRED",
                status=401,
            )
        if response.status_code >= 400:
            raise _refusal(response)
        return response.json() if response.content else {}

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None})

    def post(self, path: str, json: Any = None, **kwargs: Any) -> Any:
        return self.request("POST", path, json=json, **kwargs)


def _refusal(response: httpx.Response) -> ApiFailure:
    """The gateway's flat error body (docs/api.md) as a failure; a body that is not one, by its status."""
    status = response.status_code
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return ApiFailure(f"HTTP {status}: {response.text[:200]}", code=f"HTTP_{status}", status=status)
    message = body.get("message") or body.get("error") or str(body)
    field = body.get("field") if isinstance(body.get("field"), str) else None
    issues = body.get("issues") if isinstance(body.get("issues"), list) else None
    code = str(body.get("code") or f"HTTP_{status}")
    return ApiFailure(str(message), code=code, field=field, status=status, issues=issues)
