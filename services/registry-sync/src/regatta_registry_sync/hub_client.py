"""Harbor's hub client (supabase-py over httpx) given an httpx client of ours for one hub read.

Harbor builds its Supabase client itself (`harbor.auth.client`) and reads every answer whole: a hub
that answered with an endless JSON body would fill this service's memory, and one that trickled it
would hold the sync for as long as it liked. `bounded_hub_client()` rebinds only the `acreate_client`
name of `harbor.auth.client` (as hub_archives.py rebinds its `tarfile`), so the client Harbor builds
uses `supabase`'s documented `httpx_client` option with our client: every connection through the
outbound guard, every answer within regatta_shared.security.answers' bounds. Harbor's cached client is dropped
before and after and Harbor's own factory put back, so no read outside this one uses ours, nor this
one a client built before it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import harbor.auth.client as harbor_auth_client
import httpx
from regatta_shared.rules.ceilings import TaskFileBounds
from regatta_shared.security.answers import AnswerBounds, BoundsOf
from regatta_shared.security.outbound import guarded_async_client
from regatta_shared.security.source_policy import SourcePolicy

# A task's gzipped tar is never larger than its files' bytes plus a header block and padding per file,
# gzip's worst case on incompressible bytes (under 0.1 %) and its own framing.
TAR_BYTES_PER_FILE = 1024
GZIP_SLACK_BYTES = 64 * 1024
STORAGE_OBJECTS = "/storage/v1/object/"


def answer_bounds(policy: SourcePolicy, bounds: TaskFileBounds, hub_seconds: float) -> BoundsOf:
    """The bounds of each hub answer: a stored object (a task's archive, a dataset file) within a task's
    bytes and the hub read's time; any other answer (the hub's JSON) within REGATTA_FETCH_MAX_MB and
    REGATTA_FETCH_TIMEOUT_SEC."""
    stored = AnswerBounds(
        max_bytes=bounds.max_bytes
        + bounds.max_bytes // 1000
        + bounds.max_files * TAR_BYTES_PER_FILE
        + GZIP_SLACK_BYTES,
        seconds=hub_seconds,
        bytes_setting="REGATTA_MAX_TASK_MB",
        seconds_setting="the hub read's bound",
    )

    def of(request: httpx.Request) -> AnswerBounds:
        return stored if request.url.path.startswith(STORAGE_OBJECTS) else policy.answers

    return of


@asynccontextmanager
async def bounded_hub_client(
    policy: SourcePolicy, bounds: TaskFileBounds, hub_seconds: float
) -> AsyncIterator[None]:
    """While it is open, the hub client Harbor builds talks through one guarded, bounded httpx client."""
    http = guarded_async_client(
        policy.outbound,
        "hub",
        answer_bounds(policy, bounds, hub_seconds),
        timeout=hub_seconds,  # the answers' bounds are the limit; httpx's per-step default is 5 s
        follow_redirects=True,
    )

    built_by_harbor = harbor_auth_client.acreate_client

    async def acreate_bounded(url: str, key: str, options: Any = None) -> Any:
        # Harbor always passes its options (no session, its timeouts); ours adds the httpx client.
        if options is None:
            raise RuntimeError("Harbor built its hub client without options: it cannot be bounded")
        options.httpx_client = http
        return await built_by_harbor(url, key, options)

    harbor_auth_client.reset_client()
    harbor_auth_client.acreate_client = acreate_bounded
    try:
        yield
    finally:
        harbor_auth_client.acreate_client = built_by_harbor
        harbor_auth_client.reset_client()
        await http.aclose()
