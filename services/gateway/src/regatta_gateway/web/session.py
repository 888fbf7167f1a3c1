"""Sign-in for the web UI: the API token lives in an HttpOnly cookie and is checked by `auth.authenticate`.

Pages read the cookie directly (`web_scope`). The UI's JavaScript calls `/api/v1` with that same cookie:
`CookieBearerMiddleware` turns it into the `Authorization` header the API expects, so the API keeps a
single way of authenticating and the token never becomes readable by scripts. The workspace the user
switched to rides in a second cookie, turned into `X-Regatta-Workspace` the same way, so pages and the
API calls their scripts make always act in one workspace.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from fastapi import Request
from fastapi.responses import JSONResponse, RedirectResponse, Response
from starlette.requests import cookie_parser
from starlette.types import ASGIApp, Receive, Scope, Send

from regatta_gateway.authentication import authenticate
from regatta_gateway.errors import Refused
from regatta_gateway.principals import Principal
from regatta_gateway.principals import Scope as ApiScope
from regatta_gateway.queries.members import user_workspaces

HERE = Path(__file__).resolve().parent
STATIC_DIR = HERE / "static"
TEMPLATE_DIR = HERE / "templates"

COOKIE = "regatta_token"
WORKSPACE_COOKIE = "regatta_workspace"
# Header the UI's fetch calls carry. A cross-site page cannot add a custom header without a CORS
# preflight (which this server never grants), so requiring it on unsafe methods stops CSRF even if a
# browser ignored SameSite.
UI_HEADER = "x-regatta-ui"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
COOKIE_MAX_AGE = 30 * 24 * 3600


class NotSignedIn(Exception):
    """No valid sign-in cookie: pages redirect to /signin, fragments answer 401."""


def not_signed_in(request: Request, _error: NotSignedIn) -> Response:
    if request.query_params.get("fragment") or request.method != "GET":
        return JSONResponse({"error": "Not signed in", "code": "AUTH_REQUIRED"}, status_code=401)
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/signin?next={quote(target, safe='')}", status_code=303)


def check_token(request: Request, token: str) -> Principal:
    """Raises Refused (401) for an unknown, revoked or expired token."""
    return authenticate(request.app.state.store, f"Bearer {token.strip()}")


def web_scope(request: Request) -> ApiScope:
    """FastAPI dependency of every page: the signed-in user's chosen workspace, else their default.

    The user's workspaces are read once here and kept on `request.state.workspaces`: the top bar's
    switcher lists them and the switch checks against them, so a page costs no second lookup."""
    token = request.cookies.get(COOKIE)
    if not token:
        raise NotSignedIn()
    try:
        principal = check_token(request, token)
    except Refused:
        raise NotSignedIn() from None
    mine = user_workspaces(request.app.state.store, principal.user_id)
    if not mine:
        raise NotSignedIn()
    chosen = request.cookies.get(WORKSPACE_COOKIE)
    # A cookie naming a workspace the user is not in (stale, deleted or forged) means the default, not
    # a lockout.
    default = next(w for w in mine if w["default"])
    current = next((w for w in mine if w["id"] == chosen), default)
    request.state.workspaces = mine
    return ApiScope(principal, current["id"], current["name"], current["role"])


def _set_cookie(response: Response, request: Request, name: str, value: str) -> None:
    response.set_cookie(
        name,
        value,
        max_age=COOKIE_MAX_AGE,
        httponly=True,
        samesite="lax",
        secure=served_over_https(request),
        path="/",
    )


def served_over_https(request: Request) -> bool:
    """HTTPS as the browser sees it: this request's scheme, or the public URL of a deployment behind
    a TLS-terminating proxy (which talks plain HTTP to the gateway). A session cookie sent over HTTPS
    must never travel over plain HTTP too."""
    public_url = request.app.state.settings.public_url or ""
    return request.url.scheme == "https" or public_url.lower().startswith("https://")


def set_session(response: Response, request: Request, token: str) -> None:
    _set_cookie(response, request, COOKIE, token.strip())


def set_workspace(response: Response, request: Request, workspace_id: str) -> None:
    _set_cookie(response, request, WORKSPACE_COOKIE, workspace_id)


def clear_session(response: Response) -> None:
    response.delete_cookie(COOKIE, path="/")
    response.delete_cookie(WORKSPACE_COOKIE, path="/")


def safe_next(target: str | None) -> str:
    """Only same-site paths: an open redirect after sign-in would be a phishing aid."""
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/benchmarks"


class CookieBearerMiddleware:
    """Adds `Authorization: Bearer <cookie>` to `/api/v1` requests that carry the sign-in cookie only,
    and `X-Regatta-Workspace` from the workspace cookie unless the request names a workspace itself.

    Safe methods (GET: reads and download links) need just the cookie; others also need the UI header.
    A request that already has an Authorization header is left untouched (CLI and scripts).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/api/v1/"):
            headers: list[tuple[bytes, bytes]] = list(scope["headers"])
            names = {name for name, _ in headers}
            if b"authorization" not in names and b"cookie" in names:
                allowed = scope["method"] in SAFE_METHODS or UI_HEADER.encode() in names
                raw = b"; ".join(value for name, value in headers if name == b"cookie").decode("latin-1")
                cookies = cookie_parser(raw)
                token = cookies.get(COOKIE)
                if allowed and token:
                    headers.append((b"authorization", f"Bearer {token}".encode("latin-1")))
                    workspace = cookies.get(WORKSPACE_COOKIE)
                    if workspace and b"x-regatta-workspace" not in names:
                        headers.append((b"x-regatta-workspace", workspace.encode("latin-1")))
                    scope = {**scope, "headers": headers}
        await self.app(scope, receive, send)
