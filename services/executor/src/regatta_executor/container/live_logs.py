"""The container's log folders as the live view reads them while someone watches (live_sources.py): through
the engine's archive API, the way Harbor's own reads of them go.

Why the archive API and not an exec (say, a `tail` by the platform's busybox): a read makes no process in
the container, so nothing the task sees changes (no process in `ps`, none the verifier's evidence of the
agent's processes alive could list, none a restart under `enforce` could catch half-way), nothing runs as
anyone in there (no program of the image's, no confused deputy reading what the agent's user may not),
and the engine serves it in its own process, which costs less than an exec's runc, shim and containerd
(docs/performance.md). What it costs more: the whole folder comes at every read, not only what grew;
`MAX_BYTES` bounds that, and live_sources.py spaces reads by their duration.

Which folder may be read when is the environment's (`ContainerEnvironment.live_folder`): the agent's only
while its turn runs, the verifier's only once the turn's end emptied it (what the agent left there is not
the verifier's output).
"""

from __future__ import annotations

import io
import logging
import tarfile
from pathlib import PurePosixPath

import docker
from docker.errors import DockerException
from requests import RequestException

from regatta_executor.attempt.live_sources import SCANNED

log = logging.getLogger("regatta.executor.live")

# Of a folder's archive, what one read takes at most (the trajectory parsed live is at most as large):
# the files past it are not read live (the host's copy at the end has them).
MAX_BYTES = 8 * 1024 * 1024
_CHUNK = 64 * 1024


def read_files(
    api: docker.APIClient, container_id: str, folder: str, max_bytes: int = MAX_BYTES
) -> dict[str, bytes] | None:
    """The regular files directly in the container's `folder` (whole ones only, as far as `max_bytes`
    of its archive reach), by name; None if the engine cannot read it now."""
    try:
        response = api._get(
            api._url("/containers/{0}/archive", container_id), params={"path": folder}, stream=True
        )
    except (DockerException, RequestException, OSError) as error:
        log.debug("live read of %s: %r", folder, error)
        return None
    try:
        if response.status_code != 200:
            return None
        data = bytearray()
        for chunk in response.iter_content(_CHUNK):
            data += chunk[: max_bytes - len(data)]
            if len(data) >= max_bytes:
                break  # closing the response ends the engine's side of it
    except (RequestException, OSError) as error:
        log.debug("live read of %s: %r", folder, error)
        return None
    finally:
        response.close()
    return regular_files(bytes(data))


def regular_files(data: bytes) -> dict[str, bytes]:
    """The regular files one level under the archive's folder, read whole, up to the first cut one."""
    found: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
            for index, member in enumerate(archive):
                if index > SCANNED:
                    break
                parts = PurePosixPath(member.name).parts
                if len(parts) != 2 or not member.isreg():
                    continue  # the folder itself, deeper entries, links, FIFOs, devices
                content = archive.extractfile(member)
                body = content.read() if content is not None else b""
                if len(body) != member.size:
                    break
                found[parts[1]] = body
    except (tarfile.TarError, EOFError, OSError):
        pass  # the archive was cut at MAX_BYTES: what was whole before the cut is kept
    return found
