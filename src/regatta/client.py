"""A small HTTP client for `/api/v1`, used by the `regatta` CLI."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx


class ApiFailure(Exception):
    pass


def default_token() -> str | None:
    if os.environ.get("REGATTA_TOKEN"):
        return os.environ["REGATTA_TOKEN"]
    path = Path(os.environ.get("REGATTA_DATA_DIR", ".regatta")) / "token"
    return path.read_text().strip() if path.exists() else os.environ.get("REGATTA_BOOTSTRAP_TOKEN")


# The workspace every request of this process acts in: `regatta --workspace NAME …` (or REGATTA_WORKSPACE).
# Unset, the server takes the user's default workspace (the first one they were given).
_workspace: str | None = None


def select_workspace(name: str | None) -> None:
    global _workspace
    _workspace = name.strip() if name and name.strip() else None


class Client:
    def __init__(self, url: str | None = None, token: str | None = None) -> None:
        self.url = (url or os.environ.get("REGATTA_URL") or "http://127.0.0.1:8000").rstrip("/")
        token = token or default_token()
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if _workspace:
            headers["X-Regatta-Workspace"] = _workspace
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=30.0)

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self.http.request(method, f"/api/v1{path}", **kwargs)
        except httpx.TransportError as error:
            raise ApiFailure(f"Could not connect to Regatta at {self.url}: {error}") from None
        if response.status_code >= 400:
            try:
                body = response.json()
            except ValueError:
                raise ApiFailure(f"HTTP {response.status_code}: {response.text[:200]}") from None
            message = body.get("message") or body.get("error") or str(body)
            for issue in body.get("issues") or []:
                if isinstance(issue, dict):
                    line = f" (line {issue['line']})" if issue.get("line") else ""
                    message += f"\n  - {issue.get('key')}{line}: {issue.get('message')}"
            raise ApiFailure(message)
        return response.json() if response.content else {}

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None})

    def post(self, path: str, json: Any = None, **kwargs: Any) -> Any:
        return self.request("POST", path, json=json, **kwargs)
