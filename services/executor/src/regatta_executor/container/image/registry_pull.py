"""Image pulls made by the executor through the outbound guard, then handed to the engine as an archive.

The engine pulls from the host's network itself: it follows a registry's redirects (its token realm,
blob redirects to a "CDN") wherever they point, and resolves the registry's name again after our check
(DNS rebinding). So a registry that passes the outbound policy could still make the engine fetch from a
host-only service. Here every request of a pull (manifest, token, config, layers, every redirect hop)
goes through `regatta_shared.security.outbound.guarded_client`, whose connections go only to the addresses it
checked; the engine only loads the result (`docker load`: no fetch of its own).

Registry API v2 / OCI distribution: the manifest (an index picks the engine's platform), the config
blob, the layers, each checked against its digest; a pull is bounded in bytes (the image size cap) and
layers. A config the engine already has (an image's id is its config's digest) is not fetched again
past its manifest and config. Errors carry a reason class only, never what the registry answered.
"""

from __future__ import annotations

import hashlib
import io
import ipaddress
import json
import platform
import re
import tarfile
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import httpx
from docker.errors import APIError, DockerException, NotFound
from regatta_shared.security.outbound import OutboundPolicy, OutboundRefused, guarded_client, reason_of
from requests.exceptions import RequestException

INDEX_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
ACCEPT = ", ".join(INDEX_TYPES + MANIFEST_TYPES)
MAX_DOCUMENT_BYTES = 4 * 1024 * 1024  # a manifest, an index, a config or a token answer
MAX_LAYERS = 256
MAX_REDIRECTS = 5
PULL_TIMEOUT_SEC = 1800.0
_CHUNK = 1024 * 1024
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')
# Reason classes: the only words a failed pull carries after "cannot pull image X:".
NOT_FOUND = "not found or not authorised"
NOT_LOADED = "the engine did not load the image"


class PullError(Exception):
    """A pull that did not give an image; `reason` is a class of cause, never the registry's words."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Pulled:
    image_id: str  # the config's digest, which is the engine's id of the image
    manifest_digest: str  # of the document the reference named (an index, for a multi-platform tag)


class _Session:
    """One pull's requests: the registry's base URL, the guarded client and a bearer token once asked."""

    def __init__(self, client: httpx.Client, base: str, repository: str, deadline: float) -> None:
        self.client = client
        self.base = base
        self.repository = repository
        self.deadline = deadline
        self.token: str | None = None

    @contextmanager
    def get(self, path: str, accept: str | None = None) -> Iterator[httpx.Response]:
        """GET as a stream (read bounded by the caller), after a bearer token when the registry asks."""
        response = self._open(path, accept)
        try:
            yield response
        finally:
            response.close()

    def _open(self, path: str, accept: str | None) -> httpx.Response:
        for attempt in range(2):
            headers = {"Accept": accept} if accept else {}
            if self.token:
                headers["Authorization"] = f"Bearer {self.token}"
            request = self.client.build_request("GET", f"{self.base}{path}", headers=headers)
            response = self.client.send(request, stream=True)
            if response.status_code == 401 and attempt == 0 and self.token is None:
                challenge = response.headers.get("WWW-Authenticate", "")
                response.close()
                self.token = self._token(challenge)
                continue
            if response.status_code != 200:
                response.close()
                raise PullError(NOT_FOUND)
            return response
        raise PullError(NOT_FOUND)

    def _token(self, challenge: str) -> str:
        """An anonymous pull token from the realm the challenge names (itself fetched through the guard)."""
        scheme, _, rest = challenge.partition(" ")
        if scheme.lower() != "bearer":
            raise PullError(NOT_FOUND)
        fields = dict(_CHALLENGE.findall(rest))
        realm = fields.get("realm", "")
        if not realm.startswith(("https://", "http://")):
            raise PullError(NOT_FOUND)
        params = {"service": fields.get("service", ""), "scope": f"repository:{self.repository}:pull"}
        with self.client.stream("GET", realm, params=params) as response:
            if response.status_code != 200:
                raise PullError(NOT_FOUND)
            body = _read_document(response)
        try:
            answer = json.loads(body)
            token = answer.get("token") or answer.get("access_token")
        except (ValueError, AttributeError):
            token = None
        if not isinstance(token, str) or not token or len(token) > 64 * 1024:
            raise PullError(NOT_FOUND)
        return token


def _read_document(response: httpx.Response) -> bytes:
    data = bytearray()
    for chunk in response.iter_bytes(_CHUNK):
        data += chunk
        if len(data) > MAX_DOCUMENT_BYTES:
            raise PullError("registry answer too large")
    return bytes(data)


def _json(data: bytes) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except ValueError:
        raise PullError("unreadable manifest") from None
    if not isinstance(value, dict):
        raise PullError("unreadable manifest")
    return value


def _digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _checked_digest(value: object) -> str:
    if not isinstance(value, str) or not _DIGEST.fullmatch(value):
        raise PullError("unreadable manifest")
    return value


def registry_base(endpoint: tuple[str, int]) -> str:
    """https, but plain http for a registry on the host's loopback, as the engine itself does (an
    operator must still allow such an address: the policy refuses loopback by default)."""
    host, port = endpoint
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    scheme = "http" if loopback else "https"
    shown_host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown_host}:{port}"


def _platform_manifest(index: dict[str, Any]) -> str:
    """The digest of the index's manifest for this engine's platform (linux and this machine's
    architecture), which the engine would pick."""
    arch = _ARCH.get(platform.machine().lower(), platform.machine().lower())
    for entry in index.get("manifests") or []:
        if not isinstance(entry, dict):
            continue
        wanted = entry.get("platform") or {}
        if wanted.get("os") == "linux" and wanted.get("architecture") == arch:
            return _checked_digest(entry.get("digest"))
    raise PullError(f"no linux/{arch} image")


def pull(
    client: docker.DockerClient,
    *,
    endpoint: tuple[str, int],
    repository: str,
    reference: str,
    tag: str | None,
    policy: OutboundPolicy,
    max_bytes: int | None,
) -> Pulled:
    """Pull `repository` at `reference` (a tag or a digest) from the registry at `endpoint` into the
    engine; `tag`, when given, is what the loaded image is tagged as (the reference as the engine
    spells it)."""
    deadline = time.monotonic() + PULL_TIMEOUT_SEC
    try:
        with guarded_client(
            policy, "image registry", timeout=60.0, follow_redirects=True, max_redirects=MAX_REDIRECTS
        ) as http:
            session = _Session(http, registry_base(endpoint), repository, deadline)
            return _pull(client, session, reference, tag, max_bytes)
    except OutboundRefused as refused:
        raise PullError(f"refused ({refused.reason})") from None
    except httpx.HTTPError as error:
        raise PullError(reason_of(error)) from None
    except OSError:
        raise PullError("registry unreachable or refused") from None


def _pull(
    client: docker.DockerClient, session: _Session, reference: str, tag: str | None, max_bytes: int | None
) -> Pulled:
    top = _manifest(session, reference)
    manifest_digest = _digest_of(top[1])
    if reference.startswith("sha256:") and manifest_digest != reference:
        raise PullError("manifest does not match its digest")
    media_type, body = top
    manifest = _json(body)
    if (manifest.get("mediaType") or media_type) in INDEX_TYPES or "manifests" in manifest:
        platform_digest = _platform_manifest(manifest)
        media_type, body = _manifest(session, platform_digest)
        if _digest_of(body) != platform_digest:
            raise PullError("manifest does not match its digest")
        manifest = _json(body)
    if (manifest.get("mediaType") or media_type) not in MANIFEST_TYPES or manifest.get("schemaVersion") != 2:
        raise PullError("unsupported manifest")
    config_digest = _checked_digest((manifest.get("config") or {}).get("digest"))
    layers = manifest.get("layers")
    if not isinstance(layers, list) or not layers or len(layers) > MAX_LAYERS:
        raise PullError("unsupported manifest")
    config = _blob_document(session, config_digest)

    if not _engine_has(client, config_digest):
        with tempfile.TemporaryDirectory(prefix="regatta-pull-") as folder:
            archive = _archive(session, Path(folder), config_digest, config, layers, tag, max_bytes)
            _load(client, archive)
        if not _engine_has(client, config_digest):
            raise PullError(NOT_LOADED)
    elif tag:
        repository, _, name = tag.rpartition(":")
        _tag(client, config_digest, repository, name)
    return Pulled(config_digest, manifest_digest)


def _manifest(session: _Session, reference: str) -> tuple[str, bytes]:
    with session.get(f"/v2/{session.repository}/manifests/{reference}", ACCEPT) as response:
        media_type = response.headers.get("Content-Type", "").split(";")[0].strip()
        return media_type, _read_document(response)


def _blob_document(session: _Session, digest: str) -> bytes:
    with session.get(f"/v2/{session.repository}/blobs/{digest}") as response:
        data = _read_document(response)
    if _digest_of(data) != digest:
        raise PullError("blob does not match its digest")
    return data


def _archive(
    session: _Session,
    folder: Path,
    config_digest: str,
    config: bytes,
    layers: list[Any],
    tag: str | None,
    max_bytes: int | None,
) -> Path:
    """A `docker save` archive of the image (manifest.json, its config, its layers as fetched: the
    engine decompresses them and checks them against the config's diff ids as it loads)."""
    names = []
    total = 0
    for layer in layers:
        digest = _checked_digest((layer or {}).get("digest") if isinstance(layer, dict) else None)
        name = f"{digest.removeprefix('sha256:')}.layer"
        if name not in names:
            total = _fetch_blob(session, digest, folder / name, total, max_bytes)
        names.append(name)
    config_name = f"{config_digest.removeprefix('sha256:')}.json"
    (folder / config_name).write_bytes(config)
    manifest = [{"Config": config_name, "RepoTags": [tag] if tag else [], "Layers": names}]
    archive = folder / "image.tar"
    with tarfile.open(archive, "w") as tar:
        data = json.dumps(manifest).encode()
        info = tarfile.TarInfo("manifest.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        for name in [config_name, *dict.fromkeys(names)]:
            tar.add(folder / name, arcname=name)
    return archive


def _fetch_blob(session: _Session, digest: str, path: Path, total: int, max_bytes: int | None) -> int:
    hasher = hashlib.sha256()
    with session.get(f"/v2/{session.repository}/blobs/{digest}") as response, path.open("wb") as out:
        for chunk in response.iter_bytes(_CHUNK):
            total += len(chunk)
            if max_bytes is not None and total > max_bytes:
                raise PullError(f"over the {max_bytes // 2**20} MiB an image may be")
            if time.monotonic() > session.deadline:
                raise PullError("timed out")
            hasher.update(chunk)
            out.write(chunk)
    if "sha256:" + hasher.hexdigest() != digest:
        raise PullError("blob does not match its digest")
    return total


def _engine_has(client: docker.DockerClient, image_id: str) -> bool:
    try:
        client.api.inspect_image(image_id)
        return True
    except NotFound:
        return False
    except (APIError, DockerException, RequestException) as error:
        raise PullError("the engine did not answer") from error


def _load(client: docker.DockerClient, archive: Path) -> None:
    try:
        with archive.open("rb") as data:
            for chunk in client.api.load_image(data, quiet=True):
                if isinstance(chunk, dict) and chunk.get("error"):
                    raise PullError("the engine refused the image")
    except (APIError, DockerException, RequestException) as error:
        raise PullError("the engine refused the image") from error


def _tag(client: docker.DockerClient, image_id: str, repository: str, tag: str) -> None:
    try:
        client.api.tag(image_id, repository, tag)
    except (APIError, DockerException, RequestException) as error:
        raise PullError("the engine did not answer") from error
