"""The web UI: server-rendered pages (Jinja2), a little vanilla JavaScript, no front-end build step.

`install(app)` is the only hook the gateway needs: it adds the page routes, the static files and the
middleware that lets the UI's own `fetch` calls to `/api/v1` authenticate with the sign-in cookie.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from regatta_gateway.web.compare_routes import router as compare_router
from regatta_gateway.web.protection import BrowserProtection
from regatta_gateway.web.routes import router
from regatta_gateway.web.session import STATIC_DIR, CookieBearerMiddleware, NotSignedIn, not_signed_in
from regatta_gateway.web.settings import router as settings_router

__all__ = ["install", "router"]


def install(app: FastAPI, public_url: str | None = None) -> None:
    app.include_router(router)
    app.include_router(compare_router)
    app.include_router(settings_router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    app.add_middleware(CookieBearerMiddleware)
    # Outside the cookie middleware: a cross-site request is refused before its cookie becomes a token.
    app.add_middleware(BrowserProtection, public_url=public_url)
    app.add_exception_handler(NotSignedIn, not_signed_in)  # type: ignore[arg-type]
