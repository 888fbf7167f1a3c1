"""The ASGI layer that applies `FailureThrottle` to every request that presents a credential.

A credential is a bearer token (Authorization), the sign-in cookie, or a sign-in form post. A request
without one is not a guess and is never counted. A 401 answer to a request with one is a failure of
its source address and, when the token is visible here, of the token's prefix (so guesses spread over
many addresses at one token are slowed too). While either is throttled the request is answered 429
with Retry-After, before any route runs.
"""

from __future__ import annotations

from fastapi.responses import JSONResponse
from starlette.requests import cookie_parser
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from regatta_gateway.throttle.failures import FailureThrottle
from regatta_gateway.web.session import COOKIE

SIGN_IN = ("POST", "/signin")
PREFIX_LENGTH = 8


def _credential_keys(scope: Scope) -> list[str] | None:
    """Throttle keys of a request that presents a credential, else None."""
    headers = dict(scope["headers"])
    token = None
    authorization = headers.get(b"authorization")
    if authorization is not None:
        token = authorization.decode("latin-1").removeprefix("Bearer ").strip()
    elif b"cookie" in headers:
        token = cookie_parser(headers[b"cookie"].decode("latin-1")).get(COOKIE)
    if token is None and (scope["method"], scope["path"]) != SIGN_IN:
        return None
    client = scope.get("client")
    keys = [f"addr:{client[0] if client else 'unknown'}"]
    if token and len(token) >= PREFIX_LENGTH:
        keys.append(f"prefix:{token[:PREFIX_LENGTH]}")
    return keys


class AuthThrottle:
    def __init__(self, app: ASGIApp, throttle: FailureThrottle) -> None:
        self.app = app
        self.throttle = throttle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        keys = _credential_keys(scope) if scope["type"] == "http" else None
        if keys is None:
            await self.app(scope, receive, send)
            return
        wait = self.throttle.retry_after(keys)
        if wait is not None:
            refusal = JSONResponse(
                {
                    "error": "Too many failed authentications; try again later",
                    "message": "Too many failed authentications; try again later",
                    "code": "RATE_LIMITED",
                    "retry_after": wait,
                },
                status_code=429,
                headers={"Retry-After": str(wait)},
            )
            await refusal(scope, receive, send)
            return

        async def send_counting(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 401:
                self.throttle.record_failure(keys)
            await send(message)

        await self.app(scope, receive, send_counting)
