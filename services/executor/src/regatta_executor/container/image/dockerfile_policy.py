"""What a task's Dockerfile makes the engine fetch, checked before the engine sees it.

The classic builder fetches `ADD <url>` itself, from the host's network namespace, whatever network
the build steps get; and it looks a FROM (or `COPY --from`) image up locally before pulling it. So a
`no-network` task could bake a host-only listener's reply into its image, or build on another
workspace's image. The Dockerfile is parsed (dockerfile-parse, with ARG defaults resolved as the builder
would with no build args); every remote ADD source must pass the outbound policy, and every image a
FROM or `COPY --from` names is resolved here (references.py) and written into the Dockerfile that is
sent as its image id, so the builder neither pulls nor guesses. Anything that cannot be resolved
statically is refused. Refusals name the Dockerfile line and the value, never what a remote sent.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from urllib.parse import urlsplit

from dockerfile_parse import DockerfileParser
from dockerfile_parse.util import WordSplitter
from regatta_shared.security.outbound import OutboundPolicy, OutboundRefused, resolve, url_endpoint

from regatta_executor.container.image.references import ImageReference, ImageRefusedError, parse_reference

MAX_DOCKERFILE_BYTES = 1024 * 1024
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_GIT_SCP = re.compile(r"^[A-Za-z0-9._-]+@(?P<host>[A-Za-z0-9.-]+):")
_FROM_FLAG = re.compile(r"--from=(\S+)")
_ESCAPE_DIRECTIVE = re.compile(r"^\s*#\s*escape\s*=\s*(\S)", re.IGNORECASE)


class DockerfileRefusedError(ImageRefusedError):
    """The Dockerfile would make the engine fetch something it may not, or cannot be read statically."""


# Where the files of remote ADDs go in the build context: fetched here, sent as files, never by the engine.
REMOTE_ADD_DIR = ".regatta-add"
_REMOTE_ADD_FLAGS = ("--chown=", "--chmod=", "--link")


@dataclass(frozen=True)
class RemoteAdd:
    """An `ADD <http(s) URL>` source: fetched through the outbound guard into the context at `name`."""

    where: str
    url: str
    name: str


@dataclass
class DockerfilePlan:
    """The images the Dockerfile builds on, and how to write it with those images' ids."""

    lines: list[str]
    images: list[tuple[int, ImageReference]] = field(default_factory=list)
    """(1-based line, reference) of every FROM and `COPY --from` that names an image."""
    remote_adds: list[RemoteAdd] = field(default_factory=list)
    """Every http(s) source of an ADD; the instruction is written as a COPY of the fetched files."""
    _rewrites: list[tuple[int, int, Callable[[dict[str, str]], str]]] = field(default_factory=list)

    def rewritten(self, ids: dict[str, str]) -> bytes:
        """The Dockerfile with each image reference replaced by `ids[str(reference)]`."""
        lines = list(self.lines)
        for start, end, render in self._rewrites:
            # Line numbers stay as written: the instruction on its first line, blank lines after.
            lines[start] = render(ids)
            for number in range(start + 1, end + 1):
                lines[number] = "\n"
        return "".join(lines).encode()


def plan(
    dockerfile: bytes,
    outbound: OutboundPolicy,
    build_args: dict[str, str] | None = None,
    *,
    shown: str = "environment/Dockerfile",
) -> DockerfilePlan:
    """`shown` names the Dockerfile in refusals; `build_args` are the ones the build is given."""
    if len(dockerfile) > MAX_DOCKERFILE_BYTES:
        raise DockerfileRefusedError(f"{shown} is larger than 1 MiB")
    try:
        text = dockerfile.decode()
    except UnicodeDecodeError:
        raise DockerfileRefusedError(f"{shown} is not UTF-8 text") from None
    for line in text.splitlines():
        if not line.strip().startswith("#"):
            break
        escape = _ESCAPE_DIRECTIVE.match(line)
        if escape and escape[1] != "\\":
            # The parser reads continuations with `\` only; another escape would hide instructions.
            raise DockerfileRefusedError(f"{shown}: an escape directive other than \\")
    parser = DockerfileParser(fileobj=io.BytesIO(dockerfile), build_args=dict(build_args or {}))
    structure, contexts, parents = parser.structure, parser.context_structure, parser.parent_images
    result = DockerfilePlan(lines=text.splitlines(keepends=True))
    if result.lines and not result.lines[-1].endswith("\n"):
        result.lines[-1] += "\n"
    stages: set[str] = set()
    stage_count = 0
    froms = iter(parents)
    for instruction, context in zip(structure, contexts, strict=True):
        kind = instruction["instruction"]
        line = int(instruction["startline"]) + 1
        where = f"{shown} line {line}"
        if kind == "FROM":
            words = instruction["value"].split()
            alias = words[-1].lower() if len(words) >= 3 and words[-2].lower() == "as" else None
            base = next(froms, "")
            if not base or "$" in base:
                raise DockerfileRefusedError(f"{where}: FROM {instruction['value']!r} cannot be resolved")
            if base.lower() not in stages and base != "scratch":
                reference = parse_reference(base, f"{where}: FROM")
                result.images.append((line, reference))
                result._rewrites.append(
                    (
                        line - 1,
                        int(instruction["endline"]),
                        lambda ids, ref=reference, alias=alias: (
                            f"FROM {ids[str(ref)]}" + (f" AS {alias}" if alias else "") + "\n"
                        ),
                    )
                )
            if alias:
                stages.add(alias)
            stage_count += 1
            continue
        if kind not in ("ADD", "COPY"):
            continue
        words = _words(instruction["value"], context, where)
        sources = [w for w in words if not w.startswith("--")][:-1]
        for flag in (w for w in words if w.startswith("--from=")):
            named = flag.removeprefix("--from=")
            if named.lower() in stages or (named.isdigit() and int(named) < stage_count):
                continue
            if "$" in named:
                raise DockerfileRefusedError(f"{where}: {kind} {flag!r} cannot be resolved")
            reference = parse_reference(named, f"{where}: {kind} --from")
            result.images.append((line, reference))
            start, end = line - 1, int(instruction["endline"])
            original = "".join(result.lines[start : end + 1])
            result._rewrites.append(
                (
                    start,
                    end,
                    lambda ids, ref=reference, raw=named, original=original: (
                        _FROM_FLAG.sub(
                            lambda m: f"--from={ids[str(ref)]}" if m[1] == raw else m[0],
                            original.replace("\\\n", " ").replace("\n", " "),
                        ).rstrip()
                        + "\n"
                    ),
                )
            )
        for source in sources:
            if "$" in source:
                raise DockerfileRefusedError(f"{where}: {kind} source {source!r} cannot be resolved")
            if kind == "ADD":
                _check_remote(source, where, outbound)
        if kind == "ADD" and any(_is_http(s) for s in sources):
            _fetch_here(result, instruction, words, sources, where)
    return result


def _is_http(source: str) -> bool:
    return source.lower().startswith(("http://", "https://"))


def _fetch_here(
    result: DockerfilePlan, instruction: dict, words: list[str], sources: list[str], where: str
) -> None:
    """The engine would fetch an ADD URL itself: following redirects and looking the name up again,
    past the policy checked here. So the file is fetched by the executor (guarded, every hop checked)
    and the instruction becomes a COPY of it, as ADD of a URL writes it: not unpacked, mode 0600."""
    if not all(_is_http(s) for s in sources):
        raise DockerfileRefusedError(f"{where}: ADD mixes URLs with other sources; split it")
    flags = [w for w in words if w.startswith("--")]
    for flag in flags:
        if not flag.startswith(_REMOTE_ADD_FLAGS):
            raise DockerfileRefusedError(
                f"{where}: ADD {flag.split('=', 1)[0]!r} is not supported with a URL"
            )
    destination = [w for w in words if not w.startswith("--")][-1]
    names = []
    for source in sources:
        base = PurePosixPath(urlsplit(source).path).name
        if not base or base in (".", "..") or any(ord(c) < 32 for c in base):
            if len(sources) > 1 or destination.endswith("/"):
                raise DockerfileRefusedError(
                    f"{where}: ADD {source[:200]!r}: no file name in the URL for {destination!r}"
                )
            base = "download"
        name = f"{REMOTE_ADD_DIR}/{len(result.remote_adds)}/{base}"
        result.remote_adds.append(RemoteAdd(where, source, name))
        names.append(name)
    start, end = int(instruction["startline"]), int(instruction["endline"])
    text = "COPY " + "".join(f"{flag} " for flag in flags) + json.dumps([*names, destination]) + "\n"
    result._rewrites.append((start, end, lambda _ids, text=text: text))


def _words(value: str, context: object, where: str) -> list[str]:
    args = dict(getattr(context, "args", {}) or {})
    envs = dict(getattr(context, "envs", {}) or {})
    stripped = value.strip()
    if stripped.startswith("["):
        try:
            items = json.loads(stripped)
        except ValueError:
            items = None
        if isinstance(items, list) and all(isinstance(item, str) for item in items):
            return [WordSplitter(item, args=args, envs=envs).dequote() for item in items]
    try:
        return list(WordSplitter(value, args=args, envs=envs).split())
    except Exception:  # the splitter's own errors on unbalanced quotes
        raise DockerfileRefusedError(f"{where}: the instruction cannot be read") from None


def _check_remote(source: str, where: str, outbound: OutboundPolicy) -> None:
    scp = _GIT_SCP.match(source)
    if not _SCHEME.match(source) and scp is None:
        return  # a path in the build context
    shown = source[:200]
    try:
        if scp is not None:
            resolve(scp["host"], 22, "ADD", outbound)
            return
        scheme = source.split("://", 1)[0].lower()
        if scheme not in ("http", "https", "git", "ssh"):
            raise DockerfileRefusedError(f"{where}: ADD {shown!r}: the scheme {scheme!r} is not allowed")
        host, port = url_endpoint(source, "ADD", schemes=("http", "https", "git", "ssh"))
        resolve(host, port, "ADD", outbound)
    except OutboundRefused as refused:
        raise DockerfileRefusedError(f"{where}: ADD {shown!r} refused ({refused.reason})") from None
