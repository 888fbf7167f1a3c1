"""The container's pid 1, the one process that outlives the kill before the verifier, closed to the agent.

The agent usually runs as the container's root, with CAP_SETUID: it can become any uid, so running pid 1
as another uid alone would not stop it from ptracing pid 1 or writing its memory (/proc/1/mem) and so
outliving the kill. What stops it is that pid 1 is not dumpable: then ptrace and /proc/<pid>/mem need
CAP_SYS_PTRACE, which Docker does not grant. The kernel marks a process not dumpable when it executes a
file it may not read; so pid 1 is the image's own shell, copied to an execute-only (0111) file owned by
root and run as an unprivileged uid (which may not read it). Its `sleep` children are such copies too.
It reaps every orphan (`wait` with no operand), which Docker's init would otherwise do.

The copies are baked into a child layer of the task's image once per image (`bake`, called by
images.py under the image's lock), so an attempt's container starts with them and uploads nothing.
"""

from __future__ import annotations

import contextlib
import io
import json
import posixpath
import secrets
import tarfile
import threading
from typing import Any

import docker

PID1_UID = 65534
FOLDER = "/.regatta"
SHELL = f"{FOLDER}/sh"
SLEEP = f"{FOLDER}/sleep"
MAIN = [SHELL, "-c", f"trap 'exit 0' TERM; while :; do {SLEEP} 3600 & wait; done"]
# The copies the named programs resolve to (busybox picks its applet by the copy's name, hence sh/sleep).
_PROGRAMS = {"sh": ("/bin/sh",), "sleep": ("/bin/sleep", "/usr/bin/sleep")}
_MAX_BYTES = 64 * 1024 * 1024
# On an image holding the copies, naming the image it was baked from: a Dockerfile's own LABEL cannot
# know its image's parent id, so it cannot pass an image without the copies off as baked.
LABEL_BAKED = "dev.regatta.pid1-of"
_lock = threading.Lock()
_cache: dict[str, bytes] = {}


class Pid1Error(RuntimeError):
    """The image lacks a shell or a sleep program for the container's pid 1."""


def _read_program(api: docker.APIClient, container_id: str, path: str) -> bytes:
    """The bytes of the regular file `path` resolves to in the (created) container, symlinks followed."""
    for _ in range(16):
        try:
            stream, stat = api.get_archive(container_id, path)
        except docker.errors.NotFound:
            raise Pid1Error(f"the image has no {path}") from None
        data = b"".join(stream)
        target = stat.get("linkTarget") or ""
        if target:
            path = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
            continue
        if stat.get("size", 0) > _MAX_BYTES:
            raise Pid1Error(f"{path} is larger than {_MAX_BYTES} bytes")
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            member = next((m for m in tar.getmembers() if m.isfile()), None)
            extracted = tar.extractfile(member) if member else None
            if extracted is None:
                raise Pid1Error(f"{path} is not a regular file")
            return extracted.read()
    raise Pid1Error(f"{path}: too many symbolic links")


def archive(api: docker.APIClient, container_id: str, image_id: str) -> bytes:
    """A tar of FOLDER (0711) with the execute-only copies, made once per image."""
    with _lock:
        cached = _cache.get(image_id)
    if cached is not None:
        return cached
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        folder = tarfile.TarInfo(FOLDER.lstrip("/"))
        folder.type, folder.mode = tarfile.DIRTYPE, 0o711
        tar.addfile(folder)
        for name, candidates in _PROGRAMS.items():
            content = _first_found(api, container_id, candidates)
            entry = tarfile.TarInfo(f"{FOLDER.lstrip('/')}/{name}")
            entry.size, entry.mode = len(content), 0o111
            tar.addfile(entry, io.BytesIO(content))
    made = out.getvalue()
    with _lock:
        if len(_cache) > 64:
            _cache.clear()
        _cache[image_id] = made
    return made


def _first_found(api: docker.APIClient, container_id: str, candidates: tuple[str, ...]) -> bytes:
    for path in candidates[:-1]:
        try:
            return _read_program(api, container_id, path)
        except Pid1Error:
            continue
    return _read_program(api, container_id, candidates[-1])


def install(api: docker.APIClient, container_id: str, image_id: str) -> None:
    """Put the copies into the created, not yet started, container."""
    if not api.put_archive(container_id, "/", archive(api, container_id, image_id)):
        raise Pid1Error("the engine refused the copies of the shell and sleep")


def baked(image: docker.models.images.Image) -> bool:
    parent = str(image.attrs.get("Parent") or "")
    return bool(parent) and (image.labels or {}).get(LABEL_BAKED) == parent


def bake(
    client: docker.DockerClient, source_id: str, labels: dict[str, str], ownership: dict[str, str]
) -> str:
    """The id of a child image of `source_id` holding the copies in FOLDER, labelled `labels` and baked.

    Made from a created, never started, container (nothing of the image runs), removed however this
    ends; it carries the `ownership` labels so that the janitor removes it if this executor is killed
    meanwhile. A committed image keeps its container's labels: those are blanked in the image. The
    child keeps the image's USER, WORKDIR and environment; its entrypoint is this pid 1 (every attempt
    sets it anyway)."""
    container = client.api.create_container(
        source_id,
        name=f"regatta-bake-{secrets.token_hex(8)}",
        entrypoint=MAIN,
        network_disabled=True,
        labels={**labels, **ownership},
        host_config=client.api.create_host_config(network_mode="none"),
    )
    container_id = str(container["Id"])
    try:
        install(client.api, container_id, source_id)
        marks = {**labels, **dict.fromkeys(ownership, ""), LABEL_BAKED: source_id}
        label = "LABEL " + " ".join(f"{key}={json.dumps(value)}" for key, value in marks.items())
        committed = client.api.commit(container_id, changes=[label], pause=False)
        return str(committed["Id"])
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            client.api.remove_container(container_id, force=True)


def container_config() -> dict[str, Any]:
    """What the container is created with for this pid 1 (instead of Docker's init)."""
    return {"entrypoint": MAIN, "init": False, "user": f"{PID1_UID}:{PID1_UID}"}
