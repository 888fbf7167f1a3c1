"""What a browser needs to be told, and what it must not be made to do from another site.

Cross-site requests: a page elsewhere can make the user's browser post a form here (login CSRF on
/signin, a forced sign-out or workspace switch). Every state-changing request that a browser could
send with our cookies is refused unless it comes from this origin, the way browsers say so:
`Sec-Fetch-Site` (same-origin, or none for what the user typed), else `Origin` matching the host or
REGATTA_PUBLIC_URL. A request with neither header did not come from a modern browser (the CLI, curl)
and carries no ambient credentials of a victim, so it passes; a bearer token in `Authorization` is
never ambient either.

Every response carries a content security policy (scripts only from /static, no framing by anyone),
X-Frame-Options and X-Content-Type-Options, so injected markup cannot run script and no other site
can frame a page to trick a click.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# Inline style attributes stay allowed: the server renders bar widths and agent colours into them,
# and styles cannot run code; scripts, objects, frames and form targets are locked to this origin.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
]


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


def cross_site(headers: dict[bytes, bytes], scheme: str, public_url: str | None) -> bool:
    """Whether a request is a browser's request made by another site."""
    fetch_site = headers.get(b"sec-fetch-site")
    if fetch_site is not None:
        return fetch_site.decode("latin-1").lower() not in ("same-origin", "none")
    origin = headers.get(b"origin")
    if origin is None:
        return False
    sent = origin.decode("latin-1").lower()
    host = headers.get(b"host", b"").decode("latin-1").lower()
    allowed = {f"{scheme}://{host}"} | ({_origin(public_url)} if public_url else set())
    return sent not in allowed


class BrowserProtection:
    def __init__(self, app: ASGIApp, public_url: str | None) -> None:
        self.app = app
        self.public_url = public_url

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        ambient = b"authorization" not in headers
        if (
            ambient
            and scope["method"] not in SAFE_METHODS
            and cross_site(headers, scope.get("scheme", "http"), self.public_url)
        ):
            refusal = JSONResponse(
                {
                    "error": "Cross-site request refused",
                    "message": "Cross-site request refused: state-changing requests must come from this site",
                    "code": "CROSS_SITE",
                    "field": "Origin",
                },
                status_code=403,
            )
            await refusal(scope, receive, self._with_headers(send))
            return
        await self.app(scope, receive, self._with_headers(send))

    @staticmethod
    def _with_headers(send: Send) -> Send:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                extra = [(name, value) for name, value in SECURITY_HEADERS if name not in present]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        return send_with_headers
