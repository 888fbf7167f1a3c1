"""The tamper check: after the agent phase and before the verifier, the container is compared with its
image, and an executable or library of the image that the agent changed, deleted or shadowed ends the
attempt `failed` (sandbox_faults.SandboxTamperedError), naming the files.

Why: the agent is root in its container and the verifier runs there after it. A wrapper in place of
`/bin/bash` (or a new `/usr/local/bin/bash`, earlier in PATH) that writes reward 1 after the test
would grade the agent's work itself. What differs from the image (modified, added, deleted) comes from
two listings by the platform's own busybox, the image's at the first start of a container of it and
the container's now (file_listing.py; the engine's changes API where no image listing was taken);
single files of the image are read from a container of the image that never starts (nothing the agent
did can reach it), and the container's through the engine's archive stat, never through a program of
the container's (the agent may have replaced it).

What is protected (docs/reliability.md says what this does and does not guarantee):
- every file under the verifier's PATH directories (the image's PATH), the library directories
  (/lib*, /usr/lib*, /usr/libexec, /usr/local/lib*) and any `*.so*` (not /etc/ld.so.cache): changed
  (a regular file, symlink or other non-directory that differs: content, mode or owner) or deleted;
- a new file that takes the name of an image executable later in PATH or of an image library in
  another library directory, and a symlinked folder of the image (such as /bin -> /usr/bin)
  replaced by a real one;
- /etc/ld.so.preload and /etc/ld.so.conf* added or changed (they make every program load a library).
(protected_paths.py defines the set, and the listings read only it.)
Files the agent adds that shadow nothing (packages it installs) are fine.
"""

from __future__ import annotations

import base64
import contextlib
import json
import posixpath
import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass

import docker
from docker.errors import NotFound

from regatta_executor.container import file_listing
from regatta_executor.container.file_listing import ADDED, DELETED, MODIFIED
from regatta_executor.container.protected_paths import (
    LIBRARY_DIRS,
    LOADER_CONFIG,
    SHARED_OBJECT,
    ProtectedPaths,
)
from regatta_executor.sandbox_faults import SandboxTamperedError

MULTIARCH = {"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu", "386": "i386-linux-gnu"}
# Go's os.FileMode type bits, as the engine's archive stat reports them.
_MODE_DIR = 1 << 31
_MODE_TYPE = _MODE_DIR | 1 << 27 | 1 << 26 | 1 << 25 | 1 << 24 | 1 << 21 | 1 << 19
_MODE_SYMLINK = 1 << 27
# One finding is enough to fail the attempt; the reason names this many, and the check stops after
# twice as many. A stat costs ~2 ms of the engine; past the budget the check fails closed (an agent
# must not hide a shadowing file behind thousands of decoys that make the check give up).
NAMED = 10
STAT_BUDGET = 2000


@dataclass(frozen=True)
class Stat:
    mode: int
    link: str

    @property
    def is_dir(self) -> bool:
        return bool(self.mode & _MODE_DIR)

    @property
    def is_symlink(self) -> bool:
        return bool(self.mode & _MODE_SYMLINK)

    @property
    def kind(self) -> int:
        return self.mode & _MODE_TYPE


def stat(api: docker.APIClient, container: str, path: str) -> Stat | None:
    """The engine's stat of `path` in the container (its last component not followed), or None."""
    url = api._url("/containers/{0}/archive", container)
    response = api.head(url, params={"path": path}, timeout=api.timeout)
    if response.status_code == 404:
        return None
    api._raise_for_status(response)
    header = response.headers.get("X-Docker-Container-Path-Stat")
    if not header:
        return None
    found = json.loads(base64.b64decode(header))
    return Stat(mode=int(found.get("mode", 0)), link=str(found.get("linkTarget", "")))


class ImageFiles:
    """The image's own files, read from a container of the image that is created and never started.
    Images are immutable: answers are kept per image id (a bounded number of images)."""

    _cache: OrderedDict[str, dict[str, Stat | None]] = OrderedDict()
    _cache_lock = threading.Lock()
    _MAX_IMAGES = 64

    def __init__(self, api: docker.APIClient, image_id: str, labels: dict[str, str]) -> None:
        self.api = api
        self.image_id = image_id
        # The janitor's labels: a reference container an executor left when it died is removed.
        self.labels = labels
        self._reference: str | None = None
        with self._cache_lock:
            known = self._cache.pop(image_id, {})
            self._cache[image_id] = known
            while len(self._cache) > self._MAX_IMAGES:
                self._cache.popitem(last=False)
        self.known = known

    def stat(self, path: str) -> Stat | None:
        if path not in self.known:
            if self._reference is None:
                self._reference = self.api.create_container(
                    self.image_id,
                    command=["/regatta-never-started"],
                    name=f"regatta-image-files-{secrets.token_hex(6)}",
                    network_disabled=True,
                    labels=self.labels,
                    host_config=self.api.create_host_config(network_mode="none"),
                )["Id"]
            self.known[path] = stat(self.api, self._reference, path)
        return self.known[path]

    def close(self) -> None:
        if self._reference is not None:
            with contextlib.suppress(NotFound):
                self.api.remove_container(self._reference, force=True)
            self._reference = None


class TamperCheck:
    def __init__(self, api: docker.APIClient, container: str, image_id: str, labels: dict[str, str]) -> None:
        self.api = api
        self.container = container
        self.image_id = image_id
        image = api.inspect_image(image_id)
        self.scope = ProtectedPaths.of_image(image)
        self.path = list(self.scope.path)
        triplet = MULTIARCH.get(str(image.get("Architecture", "")))
        extra = [f"/lib/{triplet}", f"/usr/lib/{triplet}"] if triplet else []
        self.library_dirs = [*extra, *LIBRARY_DIRS]
        self.image = ImageFiles(api, image_id, labels)
        self._stats = 0

    def protected(self, path: str) -> bool:
        return self.scope.covers(path)

    def changes(self) -> list[tuple[str, int]]:
        image = file_listing.known(self.image_id)
        if image is None:
            changes = self.api.diff(self.container) or []
            return [(str(c["Path"]), int(c["Kind"])) for c in changes if c.get("Path")]
        try:
            now = file_listing.take(self.api, self.container, image.scope)
        except file_listing.ListingError as exc:
            # After the agent phase the container is the agent's doing: what stops the platform's
            # own listing is its failure, and nothing it changed can be vouched for.
            raise SandboxTamperedError(f"the container's files could not be checked: {exc}") from exc
        return file_listing.changes(image.files, now.files)

    def findings(self) -> list[str]:
        entries = self.changes()
        parents = {posixpath.dirname(path) for path, _ in entries}
        found: list[str] = []
        try:
            for path, kind in sorted(entries):
                if len(found) >= NAMED * 2:
                    break
                if self._stats > STAT_BUDGET:
                    found.append(
                        f"more changes under the image's executable and library folders than the "
                        f"check reads ({len(entries)} changed paths)"
                    )
                    break
                if not self.protected(path):
                    continue
                finding = self._judge(path, kind, has_children=path in parents)
                if finding:
                    found.append(finding)
        finally:
            self.image.close()
        return found

    def _judge(self, path: str, kind: int, has_children: bool) -> str | None:
        if LOADER_CONFIG.match(path) and kind in (MODIFIED, ADDED):
            how = "added" if kind == ADDED else "changed"
            return f"{path} ({how}: it makes every program load a library)"
        if kind == DELETED:
            return f"{path} (deleted)"
        if kind == MODIFIED:
            if has_children:
                # A folder whose content changed: its entries are judged one by one. Unless it was a
                # symlink of the image (/bin -> /usr/bin) that is now a real folder: its new files
                # then take the place of the image's at the same paths.
                was = self._image_stat(path)
                if was is None or not was.is_symlink:
                    return None
                now = self._container_stat(path)
                if now is not None and now.is_symlink:
                    return None
                return f"{path} (the image's symlink to {was.link} replaced by a folder)"
            now = self._container_stat(path)
            if now is None or now.is_dir:
                return None  # only a folder's own metadata changed (or it is gone since)
            return f"{path} (changed)"
        return self._added(path)

    def _added(self, path: str) -> str | None:
        folder, name = posixpath.split(path)
        if folder in self.path:
            for later in self.path[self.path.index(folder) + 1 :]:
                shadowed = posixpath.join(later, name)
                found = self._image_stat(shadowed)
                if found is not None and not found.is_dir:
                    return f"{path} (added, shadows the image's {shadowed})"
        if SHARED_OBJECT.search(name) and folder in self.library_dirs:
            for other in self.library_dirs:
                if other == folder:
                    continue
                shadowed = posixpath.join(other, name)
                found = self._image_stat(shadowed)
                if found is not None and not found.is_dir:
                    return f"{path} (added, shadows the image's {shadowed})"
        return None

    def _container_stat(self, path: str) -> Stat | None:
        self._stats += 1
        return stat(self.api, self.container, path)

    def _image_stat(self, path: str) -> Stat | None:
        if path not in self.image.known:
            self._stats += 1
        return self.image.stat(path)


def check(api: docker.APIClient, container: str, image_id: str, labels: dict[str, str]) -> None:
    """Raise SandboxTamperedError naming what the agent changed of the image's executables and
    libraries; return if nothing. `labels` go on the image's reference container."""
    found = TamperCheck(api, container, image_id, labels).findings()
    if not found:
        return
    named = ", ".join(found[:NAMED])
    more = f" and {len(found) - NAMED} more" if len(found) > NAMED else ""
    raise SandboxTamperedError(
        f"the agent changed the image's executables or libraries, so the verifier cannot be trusted: "
        f"{named}{more}"
    )
