"""Task images: a named one (allow-listed local, or pulled), or built from the task's `environment/`
once per content digest.

What a task names is resolved by references.py (full references only, never an id, never the
platform's own images, local ones only when allow-listed, pulls only from registries the outbound
policy allows) and what its Dockerfile fetches is checked by dockerfile_policy.py, whose FROM and
`COPY --from` images are sent as the ids they resolved to. The build context is made here
(build_context.py) and the SHA-256 of exactly those bytes is the digest that keys the cached image.

The same digest is never built twice: a build holds an exclusive flock on `<state_dir>/images/<digest>.lock`
(so concurrent attempts of one task, in this process or in another executor on this host, wait for the
one build and then find its image), and a built image carries the digest as a label and in its tag.
A build that fails is remembered for its run (build_failures.py): the run's other attempts of that
digest end with the same error at once. Past `max_image_bytes` a built image is removed.
The lock file's mtime is the image's last use; past `max_bytes`, images are removed least recently used
first (never one a container still uses, never one being built right now). Only images built with
this state folder are counted and pruned: executors sharing an engine should share it.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import IO, TextIO

import docker
from docker.errors import APIError, BuildError, DockerException, ImageNotFound, NotFound
from regatta_shared.security.outbound import OutboundPolicy
from requests.exceptions import ReadTimeout, RequestException

from regatta_executor.container.engine import LABEL_DIGEST, LABEL_MANAGED
from regatta_executor.container.image import build_defects, dockerfile_policy, remote_adds
from regatta_executor.container.image.build_context import BuildContext, BuildContextError, build_context
from regatta_executor.container.image.build_errors import (
    ERROR_LINE_CHARS,
    ERROR_LINES,
    BuildTimeout,
    DeterministicFailure,
    ImageBuildError,
    ImageDefectError,
    StepFailed,
    build_error,
    printable,
)
from regatta_executor.container.image.build_failures import BuildFailures
from regatta_executor.container.image.references import (
    IMAGE_REPOSITORY,
    ImageRefusedError,
    ImageUnavailableError,
    ReferenceResolver,
    parse_reference,
)
from regatta_executor.container.image.resolved import ResolvedImage, located_fact

__all__ = [
    "IMAGE_REPOSITORY",
    "ImageBuildError",
    "ImageCache",
    "ImageDefectError",
    "ImageRefusedError",
    "ImageUnavailableError",
]
logger = logging.getLogger(__name__)
# On images an older executor cached: a child holding pid 1's copies, committed with its pid 1 as the
# ENTRYPOINT. Such an image is never used; a built one is built again.
LABEL_LEGACY_BAKED = "dev.regatta.pid1-of"
_FAILURES_KEPT_SEC = 7 * 24 * 3600


class ImageCache:
    def __init__(
        self,
        client: docker.DockerClient,
        state_dir: Path,
        max_bytes: int | None,
        *,
        local_images: list[str] | tuple[str, ...] = (),
        outbound: OutboundPolicy | None = None,
        max_image_bytes: int | None = None,
    ) -> None:
        self.client = client
        self.locks = state_dir / "images"
        self.max_bytes = max_bytes
        self.max_image_bytes = max_image_bytes
        self.outbound = outbound or OutboundPolicy()
        self.resolver = ReferenceResolver(client, list(local_images), self.outbound, max_image_bytes)
        self.failures = BuildFailures(self.locks)

    def named(self, reference: str) -> ResolvedImage:
        """The task's prebuilt image: an allow-listed local one, or pulled from its registry."""
        what = "[environment].docker_image"
        located = self.resolver.locate(parse_reference(reference, what), what)
        size = int(located.attrs.get("Size") or 0)
        if self.max_image_bytes is not None and size > self.max_image_bytes:
            raise ImageUnavailableError(
                f"image {located.reference.familiar!r} is {size // 2**20} MiB, over the "
                f"{self.max_image_bytes // 2**20} MiB an image may be"
            )
        return ResolvedImage.of(
            located.reference.familiar,
            located.attrs,
            built=False,
            facts=(located_fact("image", located),),
            located=located,
        )

    def digest(
        self,
        environment_dir: Path,
        *,
        dockerfile: str = "Dockerfile",
        buildargs: dict[str, str] | None = None,
    ) -> str:
        """The digest `built` keys `environment_dir`'s image by (its base images resolved)."""
        context, _ = self._context(environment_dir, dockerfile, buildargs)
        context.file.close()
        return context.digest

    def _context(
        self, environment_dir: Path, dockerfile: str, buildargs: dict[str, str] | None
    ) -> tuple[BuildContext, tuple[str, ...]]:
        """The build context to send, its Dockerfile's images resolved and written as ids."""
        name = PurePosixPath(dockerfile)
        if name.is_absolute() or ".." in name.parts or len(dockerfile) > 255 or not name.parts:
            raise ImageRefusedError(
                f"the Dockerfile {dockerfile[:255]!r} is not a path inside the build context"
            )
        path = environment_dir.joinpath(*name.parts)
        if path.is_symlink() or not path.is_file():
            raise ImageRefusedError(f"{dockerfile} is not a regular file of the build context")
        shown = f"{environment_dir.name}/{name}"
        plan = dockerfile_policy.plan(path.read_bytes(), self.outbound, buildargs, shown=shown)
        ids: dict[str, str] = {}
        facts = []
        for line, image in plan.images:
            if str(image) in ids:
                continue
            what = f"{shown} line {line}: image"
            located = self.resolver.locate(image, what)
            if (located.attrs.get("Config") or {}).get("OnBuild"):
                # Triggers run in this build without appearing in the Dockerfile checked here.
                raise ImageRefusedError(f"{what} {image.familiar!r} has ONBUILD instructions")
            ids[str(image)] = located.image_id
            facts.append(located_fact("base image", located))
        try:
            with remote_adds.fetched(plan.remote_adds, self.outbound) as downloads:
                context = build_context(
                    environment_dir,
                    dockerfile=str(name),
                    dockerfile_bytes=plan.rewritten(ids),
                    build_args=buildargs,
                    extra_files=downloads,
                    reserved=dockerfile_policy.REMOTE_ADD_DIR,
                )
        except (BuildContextError, OSError) as exc:
            raise ImageRefusedError(
                str(exc) if isinstance(exc, BuildContextError) else "the build context cannot be read"
            ) from None
        return context, tuple(facts)

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
        run_id: str | None = None,
    ) -> ResolvedImage:
        """The image of `environment_dir`'s Dockerfile, built unless one of the same digest exists, or
        this run's build of that digest failed already (then its error again, at once). A compose
        service's build names its Dockerfile (relative to the context) and build args."""
        context, facts = self._context(environment_dir, dockerfile, buildargs)
        digest = context.digest
        reference = f"{IMAGE_REPOSITORY}:{digest}"
        for fact in facts:
            log.write(f"{fact}\n")
        try:
            with self._locked(digest):
                failed = self.failures.get(digest, run_id)
                if failed is not None:
                    log.write(f"image {reference}: this run's build of it failed; not built again\n")
                    message, defect = failed
                    raise (ImageDefectError if defect else ImageBuildError)(message)
                cached = None if force else self._existing(reference)
                if cached is not None and LABEL_LEGACY_BAKED in (cached.labels or {}):
                    cached = None  # its ENTRYPOINT is an old pid 1's, the Dockerfile's lost: build again
                if cached is not None:
                    log.write(f"image {reference} is cached; not built again\n")
                    return ResolvedImage.of(reference, cached, built=False, facts=facts)
                try:
                    built_id = self._build(
                        context.file,
                        reference,
                        digest,
                        timeout_sec,
                        network_mode,
                        log,
                        str(dockerfile),
                        buildargs,
                    )
                    self._check_size(built_id)
                except DeterministicFailure as failure:
                    defect = isinstance(failure, StepFailed)
                    self.failures.record(digest, run_id, str(failure), defect=defect)
                    raise (ImageDefectError if defect else ImageBuildError)(str(failure)) from None
                self.client.images.get(built_id).tag(IMAGE_REPOSITORY, digest)
                log.write(f"built {reference}\n")
                made = self.client.images.get(reference)
        finally:
            context.file.close()
        self.prune()
        return ResolvedImage.of(reference, made, built=True, facts=facts)

    def _check_size(self, image_id: str) -> None:
        if self.max_image_bytes is None:
            return
        size = int(self.client.api.inspect_image(image_id).get("Size") or 0)
        if size > self.max_image_bytes:
            with contextlib.suppress(DockerException):
                self.client.images.remove(image_id, force=True)
            raise DeterministicFailure(
                f"the built image is {size // 2**20} MiB, over the {self.max_image_bytes // 2**20} MiB "
                "an image may be; it was removed"
            )

    def _existing(self, reference: str) -> docker.models.images.Image | None:
        try:
            return self.client.images.get(reference)
        except ImageNotFound:
            return None

    def _build(
        self,
        context: IO[bytes],
        reference: str,
        digest: str,
        timeout_sec: float,
        network_mode: str,
        log: TextIO,
        dockerfile: str = "Dockerfile",
        buildargs: dict[str, str] | None = None,
    ) -> str:
        """The id of the image built (untagged: `built` tags it once the build ended in time)."""
        log.write(f"building {reference} from {dockerfile}\n")
        deadline = time.monotonic() + timeout_sec
        # The read timeout bounds a silent step (a RUN that sleeps). The engine does not cancel a build
        # whose client went away, so on a timeout the step's container is removed (which fails the
        # build), and the image is tagged only by us, after a build that ended in time.
        builder = docker.DockerClient.from_env(timeout=max(1, int(timeout_sec)))
        image_id, step_container = None, None
        step, output = "", deque[str](maxlen=ERROR_LINES)
        try:
            stream = builder.api.build(
                fileobj=context,
                custom_context=True,
                dockerfile=dockerfile,
                buildargs=buildargs or None,
                labels={LABEL_MANAGED: "1", LABEL_DIGEST: digest},
                rm=True,
                forcerm=True,
                pull=False,
                decode=True,
                network_mode=network_mode,
                timeout=max(1, int(timeout_sec)),
            )
            for chunk in stream:
                text = str(chunk.get("stream", ""))
                log.write(text)
                if text.startswith("Step "):
                    step, output = printable(text, ERROR_LINE_CHARS), deque(maxlen=ERROR_LINES)
                elif text.startswith(" ---> Running in "):
                    step_container = text.split()[-1]
                elif text and not text.startswith((" ---> ", "Removing intermediate container")):
                    output.extend(line for line in text.splitlines() if line.strip())
                if "aux" in chunk:
                    image_id = chunk["aux"].get("ID")
                if "error" in chunk:
                    error = str(chunk["error"])
                    failed = (
                        StepFailed if build_defects.is_task_defect(error, output) else DeterministicFailure
                    )
                    raise failed(build_error(step, output, error))
                if time.monotonic() > deadline:
                    raise BuildTimeout
        except (BuildTimeout, RequestException) as exc:
            self._abort(step_container)
            if time.monotonic() > deadline or isinstance(exc, BuildTimeout | ReadTimeout):
                where = f" (at {step})" if step else ""
                raise DeterministicFailure(
                    f"the image build took longer than {timeout_sec:g} s{where}"
                ) from None
            raise ImageBuildError(f"the image build was interrupted: {exc}") from exc
        except (BuildError, APIError) as exc:
            raise DeterministicFailure(build_error(step, output, str(exc))) from exc
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
        self.failures.prune(_FAILURES_KEPT_SEC, time.time())
        if self.max_bytes is None:
            return []
        # The plain listing, not `images.list()`: that inspects each image in turn, and another
        # executor on the engine may remove one in between (NotFound would fail this attempt's start).
        images = self.client.api.images(filters={"label": f"{LABEL_MANAGED}=1"})
        entries = []
        for image in images:
            digest = (image.get("Labels") or {}).get(LABEL_DIGEST)
            if not digest:
                continue
            try:
                used = (self.locks / f"{digest}.lock").stat().st_mtime
            except FileNotFoundError:
                continue  # built by executors with another state folder: theirs to prune
            entries.append((used, digest, str(image["Id"]), int(image.get("Size") or 0)))
        total = sum(size for *_, size in entries)
        removed = []
        for _, digest, image_id, size in sorted(entries, key=lambda entry: entry[0]):
            if total <= self.max_bytes:
                break
            with self._locked(digest, blocking=False) as free:
                if not free:
                    continue
                try:
                    self.client.images.remove(image_id, noprune=False)
                except NotFound:
                    pass
                except APIError as exc:  # in use by a container
                    logger.info("image %s kept: %s", image_id, exc)
                    continue
            total -= size
            removed.append(digest)
        return removed
