"""`/api/v1/runs/{key}/downloads`: a run's download manifest with signed URLs. Thin route."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Request

from regatta_gateway.http.dependencies import ScopeDep
from regatta_gateway.http.osmosis.routes import base_url
from regatta_gateway.queries import downloads

router = APIRouter(prefix="/api/v1", tags=["v1"])


@router.get("/runs/{key}/downloads")
def run_downloads(request: Request, s: ScopeDep, key: str, types: str | None = None) -> dict[str, Any]:
    """The manifest with a signed URL per file (links for the web UI and scripts)."""
    store = request.app.state.store
    body, version = downloads.manifest(store, s, key, downloads.parse_types(types))
    run_id = body["totals"]["run_id"]
    expires = int(time.time()) + downloads.URL_TTL_SECONDS
    key_bytes = request.app.state.keys.url_signing
    for item in body["files"]:
        item["url"] = downloads.sign_url(base_url(request), key_bytes, run_id, item["path"], version, expires)
    return {**body, "expires_in": downloads.URL_TTL_SECONDS}
