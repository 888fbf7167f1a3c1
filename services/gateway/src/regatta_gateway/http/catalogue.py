"""`/api/v1` catalogues of what a run may name: harnesses and the deployment's hosted models."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from regatta_shared.rules.harnesses import HARNESSES

from regatta_gateway.http.dependencies import ScopeDep

router = APIRouter(prefix="/api/v1", tags=["v1"])


@router.get("/harnesses")
def harnesses(_s: ScopeDep) -> dict[str, Any]:
    return {"harnesses": [{"name": name, **info} for name, info in sorted(HARNESSES.items())]}


@router.get("/hosted-models")
def hosted_models(request: Request, _s: ScopeDep) -> dict[str, Any]:
    """The deployment's hosted models by name, with their LoRA adapters; never a key."""
    return {"hosted_models": [model.public() for model in request.app.state.hosted_models]}
