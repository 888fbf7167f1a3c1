"""Image references a task names (`[environment].docker_image`, a Dockerfile's FROM and COPY --from):
parsed as full references and turned into an image id without ever asking the engine to guess.

Threats (task authors in other workspaces of one deployment): an id or id prefix (`516c`) or the
platform's own `regatta-env:<digest>` would run a task in another workspace's built image, hidden files
and all; a local image the operator did not name could be anything somebody left on the engine; a pull
from `127.0.0.1:P/x` makes the engine, on the host's network, query a host-only service, and its error
echoes the reply. So: a reference is parsed by the distribution grammar and never looked up as an id;
the platform's repository and images carrying its labels are refused; a local image is used only when
the operator allow-lists its reference (`local_images`), matched exactly against the engine's RepoTags
or RepoDigests; any other reference is pulled from its registry after the registry's addresses pass the
outbound policy, and a failed pull says only a fixed reason class, never the engine's or registry's text.
The pull itself is the executor's (registry_pull.py): every request, its token realm and every redirect
hop go through the outbound guard to checked addresses only, and the engine just loads the result, so
neither a registry's redirect nor a second DNS answer takes the engine to a host-only service.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

import docker
from docker.errors import APIError, DockerException, NotFound
from regatta_shared.security.outbound import OutboundPolicy, OutboundRefused, resolve
from requests.exceptions import RequestException

from regatta_executor.container.engine import LABEL_DIGEST, LABEL_MANAGED
from regatta_executor.container.image import registry_pull

IMAGE_REPOSITORY = "regatta-env"
DEFAULT_REGISTRY = "docker.io"
# Where the engine pulls docker.io images from (the host the outbound policy must allow).
DOCKER_HUB_ENDPOINT = "registry-1.docker.io"
MAX_REFERENCE = 255

# The distribution reference grammar (github.com/distribution/reference, regexp.go).
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*(?::[0-9]{{1,5}})?"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REFERENCE = re.compile(
    rf"^(?:(?P<domain>{_DOMAIN})/)?(?P<path>{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?(?:@(?P<digest>sha256:[0-9a-f]{64}))?$"
)
_IMAGE_ID = re.compile(r"^(?:sha256:)?[0-9a-f]{1,64}$")


class ImageUnavailableError(RuntimeError):
    """A task's image cannot be had (an infrastructure error, naming the image, never the remote's text)."""


class ImageRefusedError(ImageUnavailableError):
    """A task names an image it may not use (an id, the platform's own, a local one not allow-listed,
    a registry the outbound policy refuses)."""


@dataclass(frozen=True)
class ImageReference:
    """A full reference, normalised as the engine does: `docker.io/library/debian:latest`."""

    domain: str
    path: str
    tag: str | None
    digest: str | None

    @property
    def repository(self) -> str:
        return f"{self.domain}/{self.path}"

    @property
    def familiar_repository(self) -> str:
        """The repository as the engine lists it in RepoTags (`debian`, `ghcr.io/x/y`)."""
        if self.domain != DEFAULT_REGISTRY:
            return self.repository
        return self.path.removeprefix("library/")

    @property
    def familiar(self) -> str:
        """`debian:bookworm`, `ghcr.io/x/y@sha256:…`: how RepoTags/RepoDigests spell this reference."""
        if self.digest:
            return f"{self.familiar_repository}@{self.digest}"
        return f"{self.familiar_repository}:{self.tag}"

    def __str__(self) -> str:
        tail = (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")
        return f"{self.repository}{tail}"

    @property
    def registry_endpoint(self) -> tuple[str, int]:
        """The host and port the engine contacts to pull it."""
        if self.domain == DEFAULT_REGISTRY:
            return DOCKER_HUB_ENDPOINT, 443
        host, _, port = self.domain.partition(":")
        return host, int(port) if port else 443


def parse_reference(text: object, what: str) -> ImageReference:
    """`text` as a full image reference; `what` names where it came from in the refusal."""
    if not isinstance(text, str) or not text or len(text) > MAX_REFERENCE:
        raise ImageRefusedError(f"{what} is not an image reference")
    shown = text if text.isprintable() else repr(text)
    if _IMAGE_ID.fullmatch(text):
        # The engine would take it as an image id (or the prefix of one): anybody's image.
        raise ImageRefusedError(f"{what} {shown!r} is an image id, not an image reference")
    match = _REFERENCE.fullmatch(text)
    if match is None:
        raise ImageRefusedError(f"{what} {shown!r} is not an image reference")
    domain, path = match["domain"], match["path"]
    if domain is not None and not ("." in domain or ":" in domain or domain == "localhost"):
        # `foo/bar`: the first part is a path component, as the engine reads it.
        if not re.fullmatch(_PATH_COMPONENT, domain):
            raise ImageRefusedError(f"{what} {shown!r} is not an image reference")
        domain, path = None, f"{domain}/{path}"
    domain = domain or DEFAULT_REGISTRY
    if domain in ("index.docker.io", "registry-1.docker.io"):
        domain = DEFAULT_REGISTRY
    if domain == DEFAULT_REGISTRY and "/" not in path:
        path = f"library/{path}"
    tag = match["tag"] or (None if match["digest"] else "latest")
    reference = ImageReference(domain, path, tag, match["digest"])
    if reference.familiar_repository == IMAGE_REPOSITORY:
        raise ImageRefusedError(f"{what} {shown!r} is one of the platform's own images")
    return reference


@dataclass(frozen=True)
class LocatedImage:
    reference: ImageReference
    image_id: str
    attrs: dict[str, Any]
    registry_digest: str | None
    """`repository@sha256:…` as pulled (None for an allow-listed local image without one)."""
    pulled: bool


class ReferenceResolver:
    """Turns references into image ids: allow-listed local ones exactly, any other by a checked pull."""

    def __init__(
        self,
        client: docker.DockerClient,
        local_images: list[str],
        outbound: OutboundPolicy,
        max_pull_bytes: int | None = None,
    ) -> None:
        self.client = client
        self.outbound = outbound
        self.max_pull_bytes = max_pull_bytes
        self.local = {str(parse_reference(entry, "local_images entry")) for entry in local_images}

    def locate(self, reference: ImageReference, what: str) -> LocatedImage:
        if str(reference) in self.local:
            found = self._exact(reference)
            if found is None:
                raise ImageUnavailableError(f"{what} {reference.familiar!r} is not on this engine")
            return self._checked(reference, found, what, pulled=False)
        host, port = reference.registry_endpoint
        try:
            # Refused before any request is made, with the registry named.
            resolve(host, port, "image registry", self.outbound)
        except OutboundRefused as refused:
            raise ImageRefusedError(
                f"{what} {reference.familiar!r}: registry {reference.domain} refused ({refused.reason})"
            ) from None
        try:
            pulled = registry_pull.pull(
                self.client,
                endpoint=(host, port),
                repository=reference.path,
                reference=reference.digest or reference.tag or "latest",
                tag=None if reference.digest else reference.familiar,
                policy=self.outbound,
                max_bytes=self.max_pull_bytes,
            )
        except registry_pull.PullError as error:
            refusal = ImageRefusedError if error.reason.startswith("refused") else ImageUnavailableError
            raise refusal(f"cannot pull image {reference.familiar!r}: {error.reason}") from None
        try:
            attrs = dict(self.client.api.inspect_image(pulled.image_id))
        except (APIError, DockerException, RequestException):
            raise ImageUnavailableError(
                f"cannot pull image {reference.familiar!r}: {registry_pull.NOT_LOADED}"
            ) from None
        located = self._checked(reference, attrs, what, pulled=True)
        return replace(located, registry_digest=f"{reference.familiar_repository}@{pulled.manifest_digest}")

    def _exact(self, reference: ImageReference) -> dict[str, Any] | None:
        """The engine's image whose RepoTags (or RepoDigests) hold exactly this reference."""
        wanted = reference.familiar
        try:
            listed = self.client.api.images(name=reference.familiar_repository)
        except (APIError, DockerException, RequestException):
            return None
        for summary in listed:
            names = (summary.get("RepoDigests") if reference.digest else summary.get("RepoTags")) or []
            if wanted in names:
                try:
                    return dict(self.client.api.inspect_image(summary["Id"]))
                except NotFound:
                    return None
        return None

    def _checked(
        self, reference: ImageReference, attrs: dict[str, Any], what: str, *, pulled: bool
    ) -> LocatedImage:
        labels = (attrs.get("Config") or {}).get("Labels") or {}
        if LABEL_MANAGED in labels or LABEL_DIGEST in labels:
            raise ImageRefusedError(f"{what} {reference.familiar!r} is one of the platform's own images")
        digests = [
            d for d in attrs.get("RepoDigests") or [] if d.startswith(f"{reference.familiar_repository}@")
        ]
        return LocatedImage(reference, str(attrs["Id"]), attrs, digests[0] if digests else None, pulled)
