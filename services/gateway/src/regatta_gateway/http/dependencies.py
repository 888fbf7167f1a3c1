"""What every `/api/v1` route depends on: the caller's scope, read-your-writes, paging bounds."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Header, Query, Request

from regatta_gateway.authentication import authorize
from regatta_gateway.principals import Scope

router = APIRouter(prefix="/api/v1", tags=["v1"])


def scope(
    request: Request,
    authorization: Annotated[str | None, Header()] = None,
    x_regatta_workspace: Annotated[str | None, Header()] = None,
) -> Scope:
    return authorize(request.app.state.store, authorization, x_regatta_workspace)


def settle(request: Request) -> None:
    """Read-your-writes: fold the events a command just appended before answering it."""
    request.app.state.projections.catch_up()
    ops = getattr(request.app.state, "ops_projections", None)
    if ops is not None:
        ops.catch_up()


ScopeDep = Annotated[Scope, Depends(scope)]


Limit = Annotated[int, Query(ge=1, le=200)]


# Bounded: a larger offset can only be a mistake and would overflow the database's integer.
Offset = Annotated[int, Query(ge=0, le=1_000_000_000)]
