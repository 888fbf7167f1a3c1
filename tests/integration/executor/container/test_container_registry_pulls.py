"""Image pulls are the executor's, through the outbound guard (registry_pull.py), on a real engine: a
registry the operator allows answers its token challenge and then redirects every blob to another
host-only listener, as registries redirect to their storage. The engine would follow that redirect
from the host's network; here the listener the policy does not allow gets no request, the attempt
says which image and why, and with both allowed the same image is pulled, loaded and run, its digest
recorded. The registry serves the test base image under a config of its own, so the engine has to
load it rather than find it."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import secrets
import tarfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import docker
import pytest
from regatta_executor.attempt.image_record import read_image_record

from tests.integration.container_support import (
    BASE_IMAGE,
    build_log,
    containers_of,
    exception_type,
    rewards,
    run_trial,
    trial_dir,
    write_task,
)

pytestmark = [pytest.mark.timeout(600), pytest.mark.usefixtures("built_images_removed")]

MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json"
LAYER = "application/vnd.docker.image.rootfs.diff.tar"


@dataclass
class Served:
    """An image as a registry holds it: its manifest and blobs by digest."""

    manifest: bytes
    blobs: dict[str, bytes]
    image_id: str

    @property
    def manifest_digest(self) -> str:
        return "sha256:" + hashlib.sha256(self.manifest).hexdigest()


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def image_to_serve(engine: docker.DockerClient, nonce: str) -> Served:
    """The base image's layers under a config with a label of this test's own: an image id the engine
    has never seen (its id is the config's digest), whose layers `docker load` checks against it."""
    saved = io.BytesIO(b"".join(engine.api.get_image(BASE_IMAGE)))
    with tarfile.open(fileobj=saved) as tar:
        (entry,) = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
        config = json.load(tar.extractfile(entry["Config"]))  # type: ignore[arg-type]
        layers = [tar.extractfile(name).read() for name in entry["Layers"]]  # type: ignore[union-attr]
    config.setdefault("config", {}).setdefault("Labels", {})
    config["config"]["Labels"] = {**(config["config"]["Labels"] or {}), "test.regatta.pull": nonce}
    config_bytes = json.dumps(config).encode()
    blobs = {_digest(config_bytes): config_bytes} | {_digest(layer): layer for layer in layers}
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_V2,
        "config": {
            "mediaType": "application/vnd.docker.container.image.v1+json",
            "size": len(config_bytes),
            "digest": _digest(config_bytes),
        },
        "layers": [
            {
                "mediaType": "application/vnd.docker.image.rootfs.diff.tar",
                "size": len(layer),
                "digest": _digest(layer),
            }
            for layer in layers
        ],
    }
    return Served(json.dumps(manifest).encode(), blobs, _digest(config_bytes))


@dataclass
class Server:
    """An HTTP server on 127.0.0.1 of the test's own that counts the requests it gets."""

    requests: list[str] = field(default_factory=list)
    port: int = 0

    def serve(self, handle: object) -> None:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.requests.append(self.path)
                handle(self)  # type: ignore[operator]

            def log_message(self, *args: object) -> None:
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._http.server_address[1]
        threading.Thread(target=self._http.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._http.shutdown()
        self._http.server_close()


def _send(handler: BaseHTTPRequestHandler, status: int, body: bytes = b"", **headers: str) -> None:
    handler.send_response(status)
    for name, value in headers.items():
        handler.send_header(name.replace("_", "-"), value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


@pytest.fixture
def registry(engine: docker.DockerClient) -> Iterator[tuple[Server, Server, Served]]:
    """(the registry, the blob storage it redirects to, the image it serves as team/base:1)."""
    nonce = secrets.token_hex(6)
    served = image_to_serve(engine, nonce)
    token = secrets.token_hex(8)
    storage, registry = Server(), Server()

    def from_storage(handler: BaseHTTPRequestHandler) -> None:
        blob = served.blobs.get(handler.path.rsplit("/", 1)[-1])
        _send(handler, 200, blob) if blob is not None else _send(handler, 404)

    def from_registry(handler: BaseHTTPRequestHandler) -> None:
        path = handler.path
        if path.startswith("/token?"):
            _send(handler, 200, json.dumps({"token": token}).encode(), Content_Type="application/json")
        elif handler.headers.get("Authorization") != f"Bearer {token}":
            realm = f'Bearer realm="http://127.0.0.1:{registry.port}/token",service="test"'
            _send(handler, 401, b"{}", WWW_Authenticate=realm)
        elif path in ("/v2/team/base/manifests/1", f"/v2/team/base/manifests/{served.manifest_digest}"):
            _send(handler, 200, served.manifest, Content_Type=MANIFEST_V2)
        elif path.startswith("/v2/team/base/blobs/"):
            digest = path.rsplit("/", 1)[-1]
            _send(handler, 307, Location=f"http://127.0.0.1:{storage.port}/blobs/{digest}")
        else:
            _send(handler, 404)

    storage.serve(from_storage)
    registry.serve(from_registry)
    try:
        yield registry, storage, served
    finally:
        registry.close()
        storage.close()
        for name in (f"127.0.0.1:{registry.port}/team/base:1", served.image_id):
            with contextlib.suppress(docker.errors.APIError):
                engine.api.remove_image(name, force=True)


async def test_a_registry_redirect_to_a_host_only_listener_is_never_followed(
    engine: docker.DockerClient, tmp_path: Path, registry: tuple[Server, Server, Served]
) -> None:
    server, storage, served = registry
    reference = f"127.0.0.1:{server.port}/team/base:1"
    task = write_task(
        tmp_path / "tasks",
        "pulled",
        solve="echo pulled > /logs/agent/done.txt",
        test="echo 1 > /logs/verifier/reward.txt",
        environment=f'docker_image = "{reference}"\n',
    )
    (task / "environment" / "Dockerfile").unlink()

    refused = await run_trial(task, "oracle", tmp_path, outbound_allow=f"127.0.0.1:{server.port}")
    assert exception_type(refused) == "ImageRefusedError"
    message = refused.exception_info.exception_message or ""
    refusal = "refused (address not allowed unless REGATTA_OUTBOUND_ALLOW names it)"
    assert f"cannot pull image '{reference}': {refusal}" in message, message
    assert any(path.startswith("/v2/team/base/blobs/") for path in server.requests)
    assert storage.requests == [], "the listener the policy does not allow got no request"
    assert containers_of(engine, refused.trial_name) == []
    with pytest.raises(docker.errors.ImageNotFound):
        engine.images.get(served.image_id)

    both = f"127.0.0.1:{server.port},127.0.0.1:{storage.port}"
    pulled = await run_trial(task, "oracle", tmp_path, outbound_allow=both)
    assert exception_type(pulled) is None, pulled.exception_info
    assert rewards(pulled) == {"reward": 1}
    assert engine.images.get(reference).id == served.image_id
    digest = f"127.0.0.1:{server.port}/team/base@{served.manifest_digest}"
    assert digest in build_log(tmp_path, pulled)
    record = read_image_record(trial_dir(tmp_path, pulled))
    assert record is not None
    assert (record.source, record.image_id, record.registry_digest) == ("pulled", served.image_id, digest)
    assert {path.rsplit("/", 1)[-1] for path in storage.requests} == set(served.blobs)


async def test_a_pulled_blob_that_does_not_match_its_digest_is_refused(
    engine: docker.DockerClient, tmp_path: Path, registry: tuple[Server, Server, Served]
) -> None:
    """A registry (or whatever answers for its storage) that serves other bytes than the manifest names
    gets nothing loaded."""
    server, storage, served = registry
    layer = next(d for d, blob in served.blobs.items() if len(blob) > 1024 * 1024)
    served.blobs[layer] = served.blobs[layer][:-1] + b"x"
    reference = f"127.0.0.1:{server.port}/team/base:1"
    task = write_task(tmp_path / "tasks", "tampered", environment=f'docker_image = "{reference}"\n')
    (task / "environment" / "Dockerfile").unlink()
    both = f"127.0.0.1:{server.port},127.0.0.1:{storage.port}"
    result = await run_trial(task, "oracle", tmp_path, outbound_allow=both)
    assert exception_type(result) == "ImageUnavailableError"
    assert f"cannot pull image '{reference}': blob does not match its digest" in (
        result.exception_info.exception_message or ""
    )
    with pytest.raises(docker.errors.ImageNotFound):
        engine.images.get(served.image_id)


def _pulled_task(tmp_path: Path, name: str, reference: str) -> Path:
    task = write_task(tmp_path / "tasks", name, environment=f'docker_image = "{reference}"\n')
    (task / "environment" / "Dockerfile").unlink()
    return task


async def test_an_image_over_the_size_cap_stops_its_pull_and_loads_nothing(
    engine: docker.DockerClient, tmp_path: Path, registry: tuple[Server, Server, Served]
) -> None:
    """`max_image_mb` bounds what a pull fetches, counted as the bytes arrive (the base image's layer
    is about 28 MiB; the cap is 4)."""
    server, storage, served = registry
    reference = f"127.0.0.1:{server.port}/team/base:1"
    both = f"127.0.0.1:{server.port},127.0.0.1:{storage.port}"
    task = _pulled_task(tmp_path, "too-big", reference)
    result = await run_trial(task, "oracle", tmp_path, outbound_allow=both, max_image_mb=4)
    assert exception_type(result) == "ImageUnavailableError"
    message = result.exception_info.exception_message or ""
    assert f"cannot pull image '{reference}': over the 4 MiB an image may be" in message, message
    assert containers_of(engine, result.trial_name) == []
    with pytest.raises(docker.errors.ImageNotFound):
        engine.images.get(served.image_id)


@pytest.mark.parametrize(
    ("attack", "reason"),
    [("huge-manifest", "registry answer too large"), ("many-layers", "unsupported manifest")],
)
async def test_a_manifest_too_large_or_with_too_many_layers_is_refused_before_any_blob(
    engine: docker.DockerClient,
    tmp_path: Path,
    registry: tuple[Server, Server, Served],
    attack: str,
    reason: str,
) -> None:
    """A registry's documents are bounded (4 MiB) and so is an image's layer count (256): neither a
    manifest that never ends nor one naming 10,000 layers costs more than its first read."""
    server, storage, served = registry
    manifest = json.loads(served.manifest)
    if attack == "huge-manifest":
        manifest["annotations"] = {"padding": "x" * (5 * 1024 * 1024)}
    else:
        manifest["layers"] = manifest["layers"] * 10_000
    served.manifest = json.dumps(manifest).encode()
    reference = f"127.0.0.1:{server.port}/team/base:1"
    both = f"127.0.0.1:{server.port},127.0.0.1:{storage.port}"
    result = await run_trial(
        _pulled_task(tmp_path, attack, reference), "oracle", tmp_path, outbound_allow=both
    )
    assert exception_type(result) == "ImageUnavailableError"
    message = result.exception_info.exception_message or ""
    assert f"cannot pull image '{reference}': {reason}" in message, message
    assert storage.requests == [], "no blob was fetched"
    with pytest.raises(docker.errors.ImageNotFound):
        engine.images.get(served.image_id)
