"""The image's own files, read from a container of the image that is created and never started: nothing the
agent did can reach it. The tool chain's evidence (toolchain.py) takes the image's side of a changed
file from here."""

from __future__ import annotations

import contextlib
import hashlib
import secrets
import tarfile

import docker
from docker.errors import NotFound

# A file of the image is hashed up to this size.
MAX_IMAGE_HASH_BYTES = 256 * 1024 * 1024


class ImageFiles:
    """The image's own files, read from a container of the image that is created and never started
    (nothing the agent did can reach it)."""

    def __init__(self, api: docker.APIClient, image_id: str, labels: dict[str, str]) -> None:
        self.api = api
        self.image_id = image_id
        # The janitor's labels: a reference container an executor left when it died is removed.
        self.labels = labels
        self._reference: str | None = None

    def sha256(self, path: str) -> str | None:
        if self._reference is None:
            self._reference = self.api.create_container(
                self.image_id,
                command=["/regatta-never-started"],
                name=f"regatta-image-files-{secrets.token_hex(6)}",
                network_disabled=True,
                labels=self.labels,
                host_config=self.api.create_host_config(network_mode="none"),
            )["Id"]
        try:
            stream, _ = self.api.get_archive(self._reference, path)
        except NotFound:
            return None
        with _Stream(stream) as reader, tarfile.open(fileobj=reader, mode="r|") as archive:
            for member in archive:
                if not member.isfile() or member.size > MAX_IMAGE_HASH_BYTES:
                    return None
                handle = archive.extractfile(member)
                if handle is None:
                    return None
                digest = hashlib.sha256()
                while chunk := handle.read(1 << 20):
                    digest.update(chunk)
                return digest.hexdigest()
        return None

    def close(self) -> None:
        if self._reference is not None:
            with contextlib.suppress(NotFound):
                self.api.remove_container(self._reference, force=True)
            self._reference = None


class _Stream:
    """A file-like reader over the engine's chunked archive stream, for tarfile's streaming mode."""

    def __init__(self, chunks: object) -> None:
        self._chunks = iter(chunks)  # type: ignore[call-overload]
        self._buffer = b""

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self._buffer) < size:
            chunk = next(self._chunks, None)
            if chunk is None:
                break
            self._buffer += chunk
        if size < 0:
            data, self._buffer = self._buffer, b""
        else:
            data, self._buffer = self._buffer[:size], self._buffer[size:]
        return data

    def __enter__(self) -> _Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        close = getattr(self._chunks, "close", None)
        if close is not None:
            close()
