"""Which optional `/api/v1` routes (secrets, downloads) this gateway registered, so pages link only those."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

DOWNLOADS_ROUTE = "/api/v1/runs/{key}/downloads"
SECRETS_ROUTE = "/api/v1/secrets"


def route_features(app: FastAPI) -> dict[str, Any]:
    """Secrets and downloads belong to another part of the gateway: the UI links them only if registered.

    The downloads route answers a manifest of the run's files (summary, results, logs, artifacts) with a
    signed URL each; artifact links and trajectories in Task Results are read through it as well.
    """
    # The OpenAPI document lists every /api/v1 route whatever way routers were included (and is cached).
    paths = app.openapi().get("paths", {})

    def has(path: str, method: str) -> bool:
        return method in paths.get(path, {})

    return {
        "secrets": has(SECRETS_ROUTE, "get") and has(SECRETS_ROUTE, "post"),
        "downloads": DOWNLOADS_ROUTE if has(DOWNLOADS_ROUTE, "get") else None,
    }
