"""The build context sent to the engine, made here, and the digest that keys its cached image.

A built image is served to every later attempt whose digest matches, across workspaces: a digest that
skipped anything sent (Harbor's environment_content_hash skips `__pycache__`, `.git`, `.DS_Store`) let
one workspace's context, built first, be served as another's. So the digest is the SHA-256 of exactly
the tar that is sent, plus the Dockerfile's name and the build args. The tar is deterministic: members
in sorted path order, owner root, mode bits as on disk, one fixed mtime (a content key must not change
with when the archive was unpacked; 2000-01-01, as zip-based tools refuse dates before 1980).

`.dockerignore` is honoured, as `docker build` and Harbor's compose build honour it, by the docker
SDK's own matcher; the same selection makes the tar and therefore the digest. Only regular files,
folders and symlinks go in (a symlink as a link: the builder never follows one out of the context).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from docker.utils.build import exclude_paths

DIGEST_VERSION = b"regatta-build-context-v1\0"
FIXED_MTIME = 946684800
MAX_CONTEXT_BYTES = 4 * 1024 * 1024 * 1024
_CHUNK = 1024 * 1024


class BuildContextError(ValueError):
    """The environment folder cannot be sent as a build context."""


@dataclass
class BuildContext:
    file: IO[bytes]
    """The tar, positioned at its start; closed by the caller (a temporary file)."""
    digest: str


def build_context(
    environment_dir: Path,
    *,
    dockerfile: str = "Dockerfile",
    dockerfile_bytes: bytes | None = None,
    build_args: dict[str, str] | None = None,
    extra_files: list[tuple[str, Path]] | None = None,
    reserved: str = "",
) -> BuildContext:
    """The context of `environment_dir`, with `dockerfile_bytes` (when given) as its Dockerfile, and
    `extra_files` (name in the context, local file) after it, mode 0600, under the folder `reserved`,
    which the environment itself must not have."""
    root = environment_dir.resolve()
    patterns = _dockerignore(root)
    included = sorted(exclude_paths(str(root), patterns, dockerfile=dockerfile)) if patterns else None
    names = included if included is not None else _walk(root)
    if extra_files and any(n == reserved or n.startswith(reserved + "/") for n in names):
        raise BuildContextError(f"environment/{reserved} is reserved for the files of remote ADDs")
    out = tempfile.TemporaryFile()  # noqa: SIM115 (the caller closes it, after the build)
    total = 0
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in names:
            path = root / name
            info = os.lstat(path)
            member = tarfile.TarInfo(name)
            member.mtime = FIXED_MTIME
            member.uid = member.gid = 0
            member.uname = member.gname = ""
            member.mode = stat.S_IMODE(info.st_mode)
            if name == dockerfile and dockerfile_bytes is not None:
                # Always the checked text as a regular file: a symlink would send the unchecked one.
                member.mode, member.size = 0o644, len(dockerfile_bytes)
                total += member.size
                tar.addfile(member, io.BytesIO(dockerfile_bytes))
            elif stat.S_ISLNK(info.st_mode):
                member.type = tarfile.SYMTYPE
                member.linkname = os.readlink(path)
                tar.addfile(member)
            elif stat.S_ISDIR(info.st_mode):
                member.type = tarfile.DIRTYPE
                tar.addfile(member)
            elif stat.S_ISREG(info.st_mode):
                member.size = info.st_size
                total += member.size
                if total > MAX_CONTEXT_BYTES:
                    raise BuildContextError("environment/ is larger than the 4 GiB a build context may be")
                with open(path, "rb") as content:
                    tar.addfile(member, content)
            else:
                raise BuildContextError(f"environment/{name} is not a file, folder or symlink")
        folders: set[str] = set()
        for name, path in extra_files or ():
            for parent in reversed(Path(name).parents[:-1]):
                if str(parent) not in folders:
                    folders.add(str(parent))
                    folder = tarfile.TarInfo(str(parent))
                    folder.type, folder.mode, folder.mtime = tarfile.DIRTYPE, 0o755, FIXED_MTIME
                    tar.addfile(folder)
            member = tarfile.TarInfo(name)
            member.mtime, member.mode, member.size = FIXED_MTIME, 0o600, path.stat().st_size
            total += member.size
            if total > MAX_CONTEXT_BYTES:
                raise BuildContextError("environment/ is larger than the 4 GiB a build context may be")
            with path.open("rb") as content:
                tar.addfile(member, content)
    digest = hashlib.sha256(DIGEST_VERSION)
    digest.update(json.dumps([dockerfile, sorted((build_args or {}).items())]).encode() + b"\0")
    out.seek(0)
    while chunk := out.read(_CHUNK):
        digest.update(chunk)
    out.seek(0)
    return BuildContext(out, digest.hexdigest()[:40])


def _walk(root: Path) -> list[str]:
    found = []
    for folder, dirs, files in os.walk(root):
        relative = Path(folder).relative_to(root)
        for name in dirs + files:
            found.append(str(relative / name) if str(relative) != "." else name)
        # os.walk lists symlinked folders in dirs but does not descend into them (followlinks=False).
    return sorted(found)


def _dockerignore(root: Path) -> list[str]:
    path = root / ".dockerignore"
    if not path.is_file() or path.is_symlink():
        return []
    lines = path.read_text(errors="replace").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
