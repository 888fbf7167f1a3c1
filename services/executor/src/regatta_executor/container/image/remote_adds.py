"""The files of a Dockerfile's `ADD <http(s) URL>`, fetched by the executor instead of the engine.

The engine fetches an ADD URL from the host's network itself: it follows redirects (an allowed host
answering 302 to a host-only listener) and resolves the name again (a name that answers a public
address to our check, then 127.0.0.1 to the engine). Here the fetch goes through the outbound guard,
whose connections go only to the addresses it checked, each redirect hop included; the bytes are sent in
the build context (dockerfile_policy rewrote the ADD into a COPY of them), so the digest that keys the
cached image covers them too. Refusals name the line and the URL and a reason class, never what the
remote answered.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from regatta_shared.security.outbound import OutboundPolicy, OutboundRefused, guarded_client, reason_of

from regatta_executor.container.image.dockerfile_policy import DockerfileRefusedError, RemoteAdd

MAX_ADD_BYTES = 1024 * 1024 * 1024
FETCH_TIMEOUT_SEC = 600.0
MAX_REDIRECTS = 5
_CHUNK = 1024 * 1024


@contextmanager
def fetched(adds: list[RemoteAdd], policy: OutboundPolicy) -> Iterator[list[tuple[str, Path]]]:
    """(name in the context, local file) of every add, in temporary files removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="regatta-add-") as folder:
        files = []
        for index, add in enumerate(adds):
            path = Path(folder) / str(index)
            download(add, path, policy)
            files.append((add.name, path))
        yield files


def download(add: RemoteAdd, path: Path, policy: OutboundPolicy) -> None:
    shown = add.url[:200]
    deadline = time.monotonic() + FETCH_TIMEOUT_SEC
    try:
        with (
            guarded_client(
                policy, "ADD", timeout=60.0, follow_redirects=True, max_redirects=MAX_REDIRECTS
            ) as client,
            client.stream("GET", add.url) as response,
            path.open("wb") as out,
        ):
            response.raise_for_status()
            total = 0
            for chunk in response.iter_bytes(_CHUNK):
                total += len(chunk)
                if total > MAX_ADD_BYTES:
                    raise DockerfileRefusedError(
                        f"{add.where}: ADD {shown!r}: larger than {MAX_ADD_BYTES // 2**20} MiB"
                    )
                if time.monotonic() > deadline:
                    raise TimeoutError
                out.write(chunk)
    except (OutboundRefused, httpx.HTTPError, OSError) as error:
        raise DockerfileRefusedError(f"{add.where}: ADD {shown!r} refused ({reason_of(error)})") from None
