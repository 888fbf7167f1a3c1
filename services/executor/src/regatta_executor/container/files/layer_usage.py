"""What a container's writable layer costs the engine's disk: bytes, and entries (files, folders, links).

Why entries: the engine's own measure (`SizeRw`) sums the sizes of regular files, so a layer of empty
files costs nothing there, while each one takes an inode and its name a place in a folder's blocks (an
agent made 300,000 empty files with long names in 26 s: `SizeRw` 549 B, the layer 88 MB and 300,000
host inodes). The cap (storage_cap.py) holds both.

Two ways to measure, the first where it can be had:

- `HostLayer`: the layer's upper folder walked from this host (overlay2's `UpperDir`), used only where
  this process sees that folder as the upper folder of a mounted overlay (its mount table says so), so
  it is the engine's and no other. Bytes are what the disk holds: a regular file counts its size or its
  allocated blocks, whichever is more (a sparse file counts its size, as `SizeRw` did), a hard-linked
  file once; a folder or link counts its blocks, so long names cost what their folders grow by. Every
  name counts as an entry: N hard links to one file are N entries (each is a name in a folder, and
  counting names keeps a walk's cost bounded by the limit). The walk opens each folder relative to its
  parent without following links (`O_NOFOLLOW`), so nothing the agent does makes it leave the layer,
  and stops once past the entry limit, so a measure costs at most about that many `lstat`s. Folders
  nested deeper than `MAX_DEPTH` are over the cap themselves: the walk holds one descriptor per level.
- `EngineLayer`: where the folder is not this host's (a remote engine, an executor in a container
  without the engine's data root): bytes from `SizeRw`, entries as the number of changes the engine
  lists for the container (every added, changed or deleted path of the layer), counted as the answer
  streams in. Both make the engine walk the layer, so this costs more than the host's walk, and folder
  blocks are not counted (under the entry limit they are at most 264 B a name, well under the cap).
"""

from __future__ import annotations

import contextlib
import os
import resource
import stat
from dataclasses import dataclass
from pathlib import Path

import docker

# Deeper than any tree a program makes (paths would pass PATH_MAX long before), shallow enough for one
# open descriptor per level of every walk the executor's attempts make at once.
MAX_DEPTH = 256
# Descriptors this process may open, at least, once it walks: a few walks of MAX_DEPTH levels at once
# would pass the usual soft limit of 1024 (the hard one is far higher).
_WANTED_DESCRIPTORS = 65536
_descriptors_raised = False
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# How a change looks in the engine's JSON answer: a quote inside a path is escaped, so this never
# occurs within one.
_CHANGE = b'"Path":'


@dataclass(frozen=True)
class Written:
    """What the platform wrote into the layer itself (the verifier's files): not the agent's to pay."""

    bytes: int = 0
    entries: int = 0


NOTHING_WRITTEN = Written()


@dataclass(frozen=True)
class Usage:
    bytes: int
    entries: int
    too_deep: bool = False  # a folder deeper than MAX_DEPTH (the walk went no further)
    complete: bool = True  # False: the walk stopped past the entry limit, the counts are lower bounds


class HostLayer:
    """The walk of a container's upper folder on this host (see the module's notes)."""

    def __init__(self, upper: str) -> None:
        self.upper = upper

    @classmethod
    def find(cls, api: docker.APIClient, container: str) -> HostLayer | None:
        """The container's upper folder, where this process sees it mounted as the engine's overlay."""
        driver = api.inspect_container(container).get("GraphDriver") or {}
        upper = (driver.get("Data") or {}).get("UpperDir")
        if driver.get("Name") not in ("overlay2", "overlay") or not upper:
            return None
        if f"upperdir={upper}".encode() not in _overlay_upper_dirs():
            return None
        try:
            os.close(os.open(upper, _OPEN_DIR))
        except OSError:
            return None  # not ours to read (an executor that is not root)
        return cls(upper)

    def measure(self, entry_limit: int | None = None) -> Usage:
        """The layer now; the walk stops once it has counted more than `entry_limit` entries."""
        _raise_descriptor_limit()
        root = os.open(self.upper, _OPEN_DIR)
        device = os.fstat(root).st_dev
        counted = _Count(entry_limit)
        counted.bytes += os.fstat(root).st_blocks * 512
        try:
            counted.walk(root, device)
        finally:
            os.close(root)
        return Usage(counted.bytes, counted.entries, counted.too_deep, not counted.stopped)


class _Count:
    def __init__(self, entry_limit: int | None) -> None:
        self.limit = entry_limit
        self.bytes = 0
        self.entries = 0
        self.linked: set[int] = set()  # inodes of hard-linked files counted already
        self.too_deep = False
        self.stopped = False

    def walk(self, root: int, device: int) -> None:
        # Depth first, one open folder per level: (folder, its subfolders still to visit).
        levels: list[tuple[int, list[str]]] = [(root, self._list(root, device))]
        try:
            while levels and not self.stopped:
                folder, pending = levels[-1]
                if not pending:
                    levels.pop()
                    if folder != root:
                        os.close(folder)
                    continue
                name = pending.pop()
                try:
                    child = os.open(name, _OPEN_DIR, dir_fd=folder)
                except OSError:
                    continue  # gone, or no longer a folder: its name was counted
                if len(levels) >= MAX_DEPTH:
                    os.close(child)
                    self.too_deep = self.stopped = True
                    break
                levels.append((child, self._list(child, device)))
        finally:
            for folder, _ in levels:
                if folder != root:
                    os.close(folder)

    def _list(self, folder: int, device: int) -> list[str]:
        """Count the folder's entries; its subfolders on the same file system, to visit."""
        subfolders = []
        with os.scandir(folder) as entries:
            for entry in entries:
                self.entries += 1
                if self.limit is not None and self.entries > self.limit:
                    self.stopped = True
                    break
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue  # removed since it was listed
                allocated = info.st_blocks * 512
                if stat.S_ISDIR(info.st_mode):
                    self.bytes += allocated
                    if info.st_dev == device:
                        subfolders.append(entry.name)
                elif stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
                    if info.st_ino not in self.linked:
                        self.linked.add(info.st_ino)
                        self.bytes += max(info.st_size, allocated)
                elif stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode):
                    self.bytes += max(info.st_size, allocated)
                else:
                    self.bytes += allocated  # a whiteout, a fifo, a socket, a device
        return subfolders


def _raise_descriptor_limit() -> None:
    global _descriptors_raised
    if _descriptors_raised:
        return
    _descriptors_raised = True
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = _WANTED_DESCRIPTORS if hard == resource.RLIM_INFINITY else min(hard, _WANTED_DESCRIPTORS)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def _overlay_upper_dirs() -> set[bytes]:
    """The `upperdir=` options of every overlay mount this process sees (its mount table's last field:
    the super block's options)."""
    found = set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_bytes().splitlines():
            fields = line.split(b" - ", 1)[-1].split()
            if len(fields) == 3 and fields[0] == b"overlay":
                found.update(o for o in fields[2].split(b",") if o.startswith(b"upperdir="))
    return found


class EngineLayer:
    """The engine's measures of the layer, where its folder is not this host's (module's notes)."""

    def __init__(self, api: docker.APIClient, container: str) -> None:
        self.api = api
        self.container = container

    def measure(self, entry_limit: int | None = None) -> Usage:
        entries, complete = self._changes(entry_limit)
        return Usage(layer_bytes(self.api, self.container), entries, complete=complete)

    def _changes(self, entry_limit: int | None) -> tuple[int, bool]:
        api = self.api
        response = api._get(api._url("/containers/{0}/changes", self.container), stream=True)
        api._raise_for_status(response)
        count, tail = 0, b""
        try:
            for chunk in response.iter_content(1 << 16):
                data = tail + chunk
                count += data.count(_CHANGE)
                # What could begin a marker cut at the chunk's end (too short to hold a whole one).
                tail = data[-(len(_CHANGE) - 1) :]
                if entry_limit is not None and count > entry_limit:
                    return count, False
        finally:
            response.close()
        return count, True


def layer_bytes(api: docker.APIClient, container: str) -> int:
    """The engine's size of the container's writable layer (the SDK's inspect cannot ask for it)."""
    response = api._get(api._url("/containers/{0}/json", container), params={"size": 1})
    return int(api._result(response, json=True).get("SizeRw") or 0)


def measurer(api: docker.APIClient, container: str) -> HostLayer | EngineLayer:
    return HostLayer.find(api, container) or EngineLayer(api, container)
