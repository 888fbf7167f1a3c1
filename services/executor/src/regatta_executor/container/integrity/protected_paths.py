"""The verifier's tool chain: which files of a container the integrity evidence covers (toolchain.py),
and the busybox `find` predicate that lists exactly those (file_listing.py). One definition for both: the
listing must never leave out a file the evidence judges, and listing nothing else keeps it small (a third
of debian:bookworm-slim's files).

Covered: everything under the verifier's PATH folders (the image's PATH), the library folders (/lib*,
/usr/lib*, /usr/local/lib*: shared objects, `glibc-hwcaps` folders, Python's site folders with their
`.pth` files and `sitecustomize`), root's user site folder (/root/.local/lib), any `*.so*`, and the
loader's configuration and cache (/etc/ld.so.preload, /etc/ld.so.conf*, /etc/ld.so.cache).
"""

from __future__ import annotations

import posixpath
import re
import shlex
from dataclasses import dataclass
from typing import Any

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
LIBRARY_ROOTS = re.compile(r"^/(lib[^/]*|usr/lib[^/]*|usr/local/lib[^/]*)(/|$)")
SHARED_OBJECT = re.compile(r"\.so(\.|$)")
LOADER_CONFIG = re.compile(r"^/etc/(ld\.so\.preload|ld\.so\.cache|ld\.so\.conf(\.d(/.*)?)?)$")
LOADER_PATHS = ("/etc/ld.so.preload", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d")
# Python adds root's user site folder to its path when it exists (the verifier runs as root by default).
USER_SITE = "/root/.local/lib"
# The folders the dynamic loader searches by default (the multiarch ones, under /lib and /usr/lib,
# are added per image by the check).
LIBRARY_DIRS = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib")
# The same sets as find patterns (fnmatch without FNM_PATHNAME: `*` matches `/` and line breaks too).
_FIXED_PATTERNS = (
    ("-path", "/lib*"),
    ("-path", "/usr/lib*"),
    ("-path", "/usr/local/lib*"),
    ("-path", "/etc/ld.so.preload"),
    ("-path", "/etc/ld.so.cache"),
    ("-path", USER_SITE),
    ("-path", USER_SITE + "/*"),
    ("-path", "/etc/ld.so.conf"),
    ("-path", "/etc/ld.so.conf.d"),
    ("-path", "/etc/ld.so.conf.d/*"),
)
_GLOB_SPECIAL = re.compile(r"([\\*?\[])")


def path_dirs(image: dict[str, Any]) -> tuple[str, ...]:
    """The verifier's PATH: the image's (commands run with the image's environment), else the default."""
    env = (image.get("Config") or {}).get("Env") or []
    value = next((item[5:] for item in env if item.startswith("PATH=")), DEFAULT_PATH)
    dirs: list[str] = []
    for entry in value.split(":"):
        if entry.startswith("/") and (norm := posixpath.normpath(entry)) not in dirs:
            dirs.append(norm)
    return tuple(dirs)


def under(path: str, folders: tuple[str, ...] | list[str]) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


@dataclass(frozen=True)
class ProtectedPaths:
    path: tuple[str, ...]
    """The verifier's PATH folders, normalised, in order."""

    @classmethod
    def of_image(cls, image: dict[str, Any]) -> ProtectedPaths:
        return cls(path_dirs(image))

    def covers(self, path: str) -> bool:
        return (
            under(path, self.path)
            or bool(LIBRARY_ROOTS.match(path))
            or under(path, (USER_SITE,))
            or bool(SHARED_OBJECT.search(posixpath.basename(path)))
            or bool(LOADER_CONFIG.match(path))
        )

    def find_predicate(self) -> str:
        """Shell words for busybox find that select exactly what `covers`; "" selects everything (a
        PATH holding / protects every file). The PATH comes from the image, so its folders are
        glob-escaped and shell-quoted."""
        if "/" in self.path:
            return ""
        patterns: list[tuple[str, str]] = []
        for folder in self.path:
            escaped = _GLOB_SPECIAL.sub(r"\\\1", folder)
            patterns += [("-path", escaped), ("-path", escaped + "/*")]
        patterns += _FIXED_PATTERNS
        words = " -o ".join(f"{test} {shlex.quote(pattern)}" for test, pattern in patterns)
        shared = "-name '*.so' -o -name '*.so.*'"
        return f"\\( {words} -o {shared} \\)"
