"""The signed download route (contract §4.10): no bearer token, the URL's signature is the permission."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from nats.js.errors import NotFoundError
from starlette.concurrency import run_in_threadpool

from regatta_gateway.errors import Broken, NotFound
from regatta_gateway.queries.downloads import DOWNLOAD_PREFIX, safe_path, signed_file, verify_url

router = APIRouter(tags=["downloads"])
MEDIA_TYPES = {
    "summary": "text/csv; charset=utf-8",
    "results": "text/csv; charset=utf-8",
    "logs": "text/plain; charset=utf-8",
}


@router.get(DOWNLOAD_PREFIX + "/{run_id}/{path:path}", include_in_schema=False)
async def download(
    request: Request, run_id: str, path: str, v: str = "", exp: str = "", sig: str = ""
) -> Response:
    safe_path(path, "path")
    version = verify_url(request.app.state.keys.url_signing, run_id, path, v, exp, sig)
    output = await run_in_threadpool(signed_file, request.app.state.store, run_id, path, version)
    content = output.content
    if content is None:
        try:
            content = (await request.app.state.artifacts.get(output.digest)).data or b""
        except NotFoundError:
            raise NotFound("Artifact is no longer stored", code="NOT_FOUND") from None
    if len(content) != output.size:
        raise Broken("Stored artifact does not match its recorded size", code="INTERNAL")
    filename = path.rsplit("/", 1)[-1].replace('"', "_")
    return Response(
        content,
        media_type=MEDIA_TYPES.get(output.type, "application/octet-stream"),
        headers={"Content-Disposition": f'attachment; filename="{filename}"', "Cache-Control": "no-store"},
    )
