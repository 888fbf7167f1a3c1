"""Task images: pulled by name, or built from the task's `environment/` once per content digest.

The same digest is never built twice: a build holds an exclusive flock on `<state_dir>/images/<digest>.lock`
(so concurrent attempts of one task, in this process or in another executor on this host, wait for the
one build and then find its image), and a built image carries the digest as a label and in its tag.
The lock file's mtime is the image's last use; past `max_bytes`, images are removed least recently used
first (never one a container still uses, never one being built right now). Only images built with
this state folder are counted and pruned: executors sharing an engine should share it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import docker
from docker.errors import APIError, BuildError, DockerException, ImageNotFound, NotFound
from harbor.environments.definition import environment_content_hash
from requests.exceptions import ReadTimeout, RequestException

from regatta_executor.container.engine import LABEL_DIGEST, LABEL_MANAGED

IMAGE_REPOSITORY = "regatta-env"
# On images an older executor cached: a child holding pid 1's copies, committed with its pid 1 as the
# ENTRYPOINT. Such an image is never used; a built one is built again.
LABEL_LEGACY_BAKED = "dev.regatta.pid1-of"
_IMAGE_REFERENCE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}$")
logger = logging.getLogger(__name__)


class ImageUnavailableError(RuntimeError):
    """A task's named image cannot be pulled (an infrastructure error, naming the image)."""


class ImageBuildError(RuntimeError):
    """A task's Dockerfile does not build, or not within its build timeout."""


class _BuildTimeout(Exception):
    pass


@dataclass(frozen=True)
class ResolvedImage:
    reference: str
    built: bool
    """True when this call built it (false: cached, present or pulled)."""
    image_id: str
    user: str
    """The image's USER ("" when it names none)."""
    entrypoint: tuple[str, ...] = ()
    """The image's ENTRYPOINT (pid 1 starts it, pid1.py)."""
    workdir: str = ""
    """The image's WORKDIR ("" when it names none)."""

    @classmethod
    def of(cls, reference: str, image: docker.models.images.Image, *, built: bool) -> ResolvedImage:
        # One inspect per attempt: what the container's creation needs comes from the lookup itself.
        config = image.attrs.get("Config") or {}
        user = str(config.get("User") or "")
        entrypoint = tuple(str(part) for part in config.get("Entrypoint") or ())
        return cls(reference, built, str(image.id), user, entrypoint, str(config.get("WorkingDir") or ""))


def environment_digest(environment_dir: Path) -> str:
    """Content digest of the build context (every file's path and bytes, symlink targets included)."""
    digest = hashlib.sha256(environment_content_hash(environment_dir, truncate=64).encode())
    for path in sorted(environment_dir.rglob("*")):
        if path.is_symlink():
            digest.update(f"{path.relative_to(environment_dir)}->{os.readlink(path)}".encode())
    return digest.hexdigest()[:40]


def validate_reference(reference: str) -> str:
    if not _IMAGE_REFERENCE.match(reference) or ".." in reference:
        raise ImageUnavailableError(f"[environment].docker_image {reference!r} is not an image reference")
    return reference


class ImageCache:
    def __init__(self, client: docker.DockerClient, state_dir: Path, max_bytes: int | None) -> None:
        self.client = client
        self.locks = state_dir / "images"
        self.max_bytes = max_bytes

    def named(self, reference: str) -> ResolvedImage:
        """The task's prebuilt image, pulled when this engine does not have it."""
        validate_reference(reference)
        try:
            image = self.client.images.get(reference)
        except ImageNotFound:
            try:
                image = self.client.images.pull(reference)
            except (DockerException, OSError) as exc:
                raise ImageUnavailableError(f"cannot pull image {reference!r}: {exc}") from exc
        return ResolvedImage.of(reference, image, built=False)

    def built(
        self,
        environment_dir: Path,
        *,
        timeout_sec: float,
        network_mode: str,
        log: TextIO,
        force: bool = False,
        dockerfile: str = "Dockerfile",
        buildargs: dict[str, str] | None = None,
    ) -> ResolvedImage:
        """The image of `environment_dir`'s Dockerfile, built unless one of the same digest exists.
        A compose service's build names its Dockerfile (relative to the context) and build args."""
        digest = environment_digest(environment_dir)
        if dockerfile != "Dockerfile" or buildargs:
            # The same context built another way is another image.
            spec = json.dumps([digest, dockerfile, sorted((buildargs or {}).items())])
            digest = hashlib.sha256(spec.encode()).hexdigest()[:40]
        reference = f"{IMAGE_REPOSITORY}:{digest}"
        with self._locked(digest):
            cached = None if force else self._existing(reference)
            if cached is not None and LABEL_LEGACY_BAKED in (cached.labels or {}):
                cached = None  # its ENTRYPOINT is an old pid 1's, the Dockerfile's lost: build again
            if cached is not None:
                log.write(f"image {reference} is cached; not built again\n")
                return ResolvedImage.of(reference, cached, built=False)
            built_id = self._build(
                environment_dir, reference, digest, timeout_sec, network_mode, log, dockerfile, buildargs
            )
            self.client.images.get(built_id).tag(IMAGE_REPOSITORY, digest)
            log.write(f"built {reference}\n")
            made = self.client.images.get(reference)
        self.prune()
        return ResolvedImage.of(reference, made, built=True)

    def _existing(self, reference: str) -> docker.models.images.Image | None:
        try:
            return self.client.images.get(reference)
        except ImageNotFound:
            return None

    def _build(
        self,
        environment_dir: Path,
        reference: str,
        digest: str,
        timeout_sec: float,
        network_mode: str,
        log: TextIO,
        dockerfile: str = "Dockerfile",
        buildargs: dict[str, str] | None = None,
    ) -> str:
        """The id of the image built (untagged: `built` tags it once the build ended in time)."""
        log.write(f"building {reference} from {environment_dir.name}/{dockerfile}\n")
        deadline = time.monotonic() + timeout_sec
        # The read timeout bounds a silent step (a RUN that sleeps). The engine does not cancel a build
        # whose client went away, so on a timeout the step's container is removed (which fails the
        # build), and the image is tagged only by us, after a build that ended in time.
        builder = docker.DockerClient.from_env(timeout=max(1, int(timeout_sec)))
        image_id, step_container = None, None
        try:
            stream = builder.api.build(
                path=str(environment_dir),
                labels={LABEL_MANAGED: "1", LABEL_DIGEST: digest},
                rm=True,
                forcerm=True,
                pull=False,
                decode=True,
                network_mode=network_mode,
                timeout=max(1, int(timeout_sec)),
                dockerfile=dockerfile,
                buildargs=buildargs or None,
            )
            for chunk in stream:
                text = str(chunk.get("stream", ""))
                log.write(text)
                if text.startswith(" ---> Running in "):
                    step_container = text.split()[-1]
                if "aux" in chunk:
                    image_id = chunk["aux"].get("ID")
                if "error" in chunk:
                    raise ImageBuildError(f"the Dockerfile does not build: {str(chunk['error']).strip()}")
                if time.monotonic() > deadline:
                    raise _BuildTimeout
        except (_BuildTimeout, RequestException) as exc:
            self._abort(step_container)
            if time.monotonic() > deadline or isinstance(exc, _BuildTimeout | ReadTimeout):
                raise ImageBuildError(f"the image build took longer than {timeout_sec:g} s") from None
            raise ImageBuildError(f"the image build was interrupted: {exc}") from exc
        except (BuildError, APIError) as exc:
            raise ImageBuildError(f"the Dockerfile does not build: {exc}") from exc
        except Exception:
            # e.g. the attempt's log closed under us because Harbor gave up waiting: stop the build too.
            self._abort(step_container)
            raise
        finally:
            builder.close()
            with contextlib.suppress(ValueError):
                log.flush()
        if not image_id:
            raise ImageBuildError("the image build ended without an image")
        return str(image_id)

    def _abort(self, step_container: str | None) -> None:
        if step_container and re.fullmatch(r"[0-9a-f]{12,64}", step_container):
            with contextlib.suppress(DockerException):
                self.client.api.remove_container(step_container, force=True)

    @contextlib.contextmanager
    def _locked(self, digest: str, *, blocking: bool = True) -> Iterator[bool]:
        self.locks.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = self.locks / f"{digest}.lock"
        fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            os.utime(fd)  # last use, for the LRU order
            yield True
        finally:
            os.close(fd)

    def prune(self) -> list[str]:
        """Remove built images, least recently used first, until they fit in `max_bytes`."""
        if self.max_bytes is None:
            return []
        images = self.client.images.list(filters={"label": f"{LABEL_MANAGED}=1"})
        entries = []
        for image in images:
            digest = image.labels.get(LABEL_DIGEST)
            if not digest:
                continue
            try:
                used = (self.locks / f"{digest}.lock").stat().st_mtime
            except FileNotFoundError:
                continue  # built by executors with another state folder: theirs to prune
            entries.append((used, digest, image))
        total = sum(int(image.attrs.get("Size") or 0) for _, _, image in entries)
        removed = []
        for _, digest, image in sorted(entries, key=lambda entry: entry[0]):
            if total <= self.max_bytes:
                break
            with self._locked(digest, blocking=False) as free:
                if not free:
                    continue
                try:
                    self.client.images.remove(image.id, noprune=False)
                except NotFound:
                    pass
                except APIError as exc:  # in use by a container
                    logger.info("image %s kept: %s", image.id, exc)
                    continue
            total -= int(image.attrs.get("Size") or 0)
            removed.append(digest)
        return removed
