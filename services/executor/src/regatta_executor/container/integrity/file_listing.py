"""Every file of a container's root filesystem as the platform's busybox lists it (path, ctime, mode,
owner, size), and what differs from the listing its image had: the tool chain's changes (toolchain.py).

Why not the engine's changes API: this engine answers it by walking the image and the container in
full, about 400 ms of the engine's CPU for debian:bookworm-slim and seconds for a large image, for
every attempt, on the engine every attempt of the host shares. A listing costs the engine one exec
(about 25 ms) and the container about 80 ms of its own CPU; where nothing protected changed, only its
digest is sent, from the exec that ends the agent's processes (below).

Why a listing can be trusted:
- it runs after the agent phase (once the agent's processes are gone under `enforce`: verifier_turn.py), with
  the platform's static busybox from the read-only tools mount (tools.py): no program of the image or
  the agent's is involved;
- each record starts with a nonce drawn for that listing, so a file name (which may hold line breaks)
  cannot forge a record;
- any change to a file (its content, mode or owner, a rename over it) sets its ctime to the current
  time, and no process in the container can set a ctime (only by moving the clock, which needs
  CAP_SYS_TIME, outside Docker's default set). A file of the image keeps the ctime of its layer's
  extraction, so any field that differs from the image's record means a change;
- the only blind spot, a change within the same second (ctime's resolution here) as the image file's
  own ctime, is closed at the start: an attempt whose image's newest file is from the current second
  waits for the next one before anything else runs (`wait_for_next_second`).

Only the files the check protects are listed (protected_paths.py), a third of a Debian image's.

The image's listing is taken from the first container of the image at its start (nothing of an agent
has run there), and kept per image id: images are immutable. With it is kept a digest (`ImageDigest`):
the SHA-256 of the stat records of every file under the folders the check protects whole (the PATH
and library folders, /etc/ld.so.conf.d) and of the image's other protected files one by one, taken
in that container too. After an agent phase, the command that ends the agent's processes takes the
same digest once they are gone (`digest_command`): equal digests mean those records are the image's
byte for byte, so nothing the check judges changed, and the full listing is neither walked, sent nor
parsed. Why equality can be trusted without a nonce: any change gives the changed entry (or, for a
deletion, its folder) a record line that starts with a ctime later than every file of the image (the
blind spot below is closed), and no line of the image's records starts so; what the check judges
beyond the image's own files (a file added where it shadows one, a loader configuration added) can
only be added inside those folders. The digest's line cannot be forged either: the agent's processes
are gone when it is printed, and before that none could write into the platform shell's output (not
dumpable: tools.py). Any other output counts as a change, and the full listing decides.

Most often nothing the digest covers changed, and the records need not be read at all
(`_untouched_test`): a single walk of its roots finds no entry with a ctime from the container's life
(from pid 1's start, read off the kernel's uptime, with a minute and more to spare), and the roots that
exist are the image's. The same ctime argument holds: any change, addition or link gives the entry that
ctime, a deletion its folder, and a deleted root or named file shows in the presence digits or fails the
walk. Then the image's digest line is printed as it is; otherwise the digest is taken.
"""

from __future__ import annotations

import dataclasses
import posixpath
import secrets
import shlex
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

import docker

from regatta_executor.attempt.sandbox_faults import SandboxTamperedError
from regatta_executor.container.exec.tools import BUSYBOX, platform_shell
from regatta_executor.container.integrity.protected_paths import (
    LIBRARY_DIRS,
    LIBRARY_ROOTS,
    LOADER_PATHS,
    USER_SITE,
    ProtectedPaths,
    under,
)

MODIFIED, ADDED, DELETED = 0, 1, 2
# A listing is about 100 bytes a file: this is about 600,000 files. More than that in a container is
# the agent's doing (the image's own listing is taken before it runs), and the check fails closed.
MAX_LISTING_BYTES = 64 * 1024 * 1024
_MAX_IMAGES = 16
_START_TRIES = 4
_PARSE_TRIES = 2

type Record = tuple[int, int, int, int, int]  # ctime, raw mode, uid, gid, size
_FIELDS = "%Z %f %u %g %s %n"
_DIGEST_LINE = "regatta-listing-sha256"
# The digest names an image's protected files outside the walked folders in its command: at most this
# much of it (a command-line argument holds 128 KiB); more, and the check lists in full.
_MAX_NAMED_BYTES = 64 * 1024


@dataclass(frozen=True)
class Listing:
    files: dict[str, Record]
    now: int  # the engine host's clock, in seconds, when the listing ended
    taken_at: float  # time.monotonic() here when it ended
    scope: ProtectedPaths
    digest: ImageDigest | None = None  # an image's (`of_image`)

    @property
    def newest(self) -> int:
        return max((record[0] for record in self.files.values()), default=0)


_images: OrderedDict[str, Listing] = OrderedDict()
_images_lock = threading.Lock()
_per_image: dict[str, threading.Lock] = {}


class ListingError(RuntimeError):
    """The container's files could not be listed."""


def _find(scope: ProtectedPaths, fields: str) -> str:
    predicate = scope.find_predicate()
    return f"{BUSYBOX} find / -xdev {predicate} -exec {BUSYBOX} stat -c '{fields}' {{}} + 2>/dev/null"


def script(nonce: str, scope: ProtectedPaths) -> str:
    return f'{_find(scope, f"{nonce} {_FIELDS}")}; {BUSYBOX} echo "{nonce} end $({BUSYBOX} date +%s)"'


@dataclass(frozen=True)
class ImageDigest:
    roots: tuple[str, ...]
    """Folders walked whole (or single paths: a root that is a file or symlink is one record)."""
    files: tuple[str, ...]
    """The image's other protected files (a `*.so*` elsewhere), each stat'ed by its path."""
    sha256: str
    present: str | None = None
    """Which roots the image has, one digit each (1 present, 0 absent), for `_untouched_test`."""


def digest_roots(listing: Listing) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """What the digest reads for an image of `listing`: every PATH and library folder (present or not:
    what the agent adds there is judged) and the loader's configuration as roots, and the protected
    files of the image outside them. None when those files are too many to name in one command."""
    wanted = [*listing.scope.path, *LIBRARY_DIRS, *LOADER_PATHS, USER_SITE]
    wanted += [
        path
        for path in listing.files
        if posixpath.dirname(path) in ("/", "/usr", "/usr/local") and LIBRARY_ROOTS.match(path)
    ]
    roots: list[str] = []
    for path in sorted(set(wanted)):
        if not under(path, roots):
            roots.append(path)
    files = tuple(path for path in listing.files if listing.scope.covers(path) and not under(path, roots))
    if sum(len(path) + 3 for path in files) > _MAX_NAMED_BYTES:
        return None
    return tuple(roots), files


def _digest_script(roots: tuple[str, ...], files: tuple[str, ...]) -> str:
    stat = f"{BUSYBOX} stat -c '{_FIELDS}'"
    walk = f"{BUSYBOX} find {' '.join(shlex.quote(root) for root in roots)} -xdev -exec {stat} {{}} +"
    named = f"; {stat} {' '.join(shlex.quote(path) for path in files)}" if files else ""
    return (
        f"h=$({{ {walk}{named}; }} 2>/dev/null | {BUSYBOX} sha256sum) && "
        f'{BUSYBOX} echo "{_DIGEST_LINE} ${{h%% *}}"'
    )


def _presence_script(roots: tuple[str, ...]) -> str:
    """Prints one digit per root, 1 where it exists (a dangling symlink included), then a line break.
    (`[` and `echo` are the platform shell's builtins: no program runs.)"""
    quoted = " ".join(shlex.quote(root) for root in roots)
    return (
        f'for p in {quoted}; do if [ -e "$p" ] || [ -L "$p" ]; then echo -n 1; else echo -n 0; fi; done; echo'
    )


def _untouched_test(digest: ImageDigest) -> str | None:
    """A shell test that succeeds only if nothing under the digest's roots, and none of its named
    files, changed since the container started: the same roots exist, and no entry among them has a
    ctime from the container's life (pid 1's start, a minute and more to spare, from the kernel's
    uptime and pid 1's start tick: no clock the container can set). A change, an addition or a link
    gives the entry itself that ctime, a deletion its folder; a deleted named file or root fails the
    find or the presence digits. One walk, no stat records and no hash: where it fails, the digest
    decides (its records differ from the image's wherever this finds a change)."""
    if digest.present is None or len(digest.present) != len(digest.roots):
        return None
    walked = [root for root, bit in zip(digest.roots, digest.present, strict=True) if bit == "1"]
    paths = " ".join(shlex.quote(path) for path in [*walked, *digest.files])
    return (
        "{ read -r up idle < /proc/uptime && read -r s < /proc/1/stat && set -- ${s##*) } && "
        # Whole minutes back to pid 1's start (ticks of 1/100 s since boot), and two more.
        "m=$(( (${up%.*} - ${20} / 100) / 60 + 2 )) && "
        f'[ "$({_presence_script(digest.roots)})" = "{digest.present}" ] && '
        f"changed=$({BUSYBOX} find {paths} -xdev -cmin -$m -print -quit 2>&1) && "
        '[ -z "$changed" ]; }'
    )


def digest_command(listing: Listing) -> str | None:
    """Shell commands (for the platform shell, after the agent's processes are gone) that print one
    line: the container's digest, to compare with the image's (`unchanged`); None without one. Where
    nothing the digest covers changed since the container started, that is the image's digest line,
    printed without walking the records (`_untouched_test`)."""
    digest = listing.digest
    if digest is None:
        return None
    full = _digest_script(digest.roots, digest.files)
    untouched = _untouched_test(digest) if digest.files or digest.roots else None
    if untouched is None:
        return full
    return f'if {untouched}; then {BUSYBOX} echo "{_DIGEST_LINE} {digest.sha256}"; else {full}; fi'


def unchanged(listing: Listing, output: str) -> bool:
    """Whether `output`, all a command ending in `digest_command` printed, is exactly the line of the
    image's digest (anything else counts as a change: the full listing then decides)."""
    return listing.digest is not None and output == f"{_DIGEST_LINE} {listing.digest.sha256}\n"


def parse(output: bytes, nonce: str) -> tuple[dict[str, Record], int]:
    """Records are lines that start with the nonce; any other line continues the name before it."""
    head = nonce.encode() + b" "
    files: dict[str, Record] = {}
    current: list[bytes] | None = None
    end: int | None = None

    def close() -> None:
        if current is None:
            return
        fields = b"\n".join(current).split(b" ", 5)
        if len(fields) != 6:
            raise ListingError("a record of the listing is malformed")
        ctime, mode, uid, gid, size, name = fields
        path = name.decode("utf-8", "surrogateescape")
        if not path.startswith("/") or path in files:
            raise ListingError(f"the listing names {path!r} twice or not as an absolute path")
        try:
            files[path] = (int(ctime), int(mode, 16), int(uid), int(gid), int(size))
        except ValueError:
            raise ListingError("a record of the listing is malformed") from None

    for line in output.split(b"\n"):
        if line.startswith(head):
            close()
            rest = line[len(head) :]
            if rest.startswith(b"end "):
                current, end = None, int(rest[4:].strip())
                break
            current = [rest]
        elif current is not None:
            current.append(line)
    if end is None:
        raise ListingError("the listing did not finish")
    return files, end


def _output(api: docker.APIClient, container: str, argv: list[str]) -> bytes | None:
    """The stdout of `argv` run as root, None if the runtime failed to start it (see execs._run)."""
    exec_id = api.exec_create(container, argv, user="0", workdir="/", stdout=True, stderr=False)["Id"]
    output = bytearray()
    for chunk in api.exec_start(exec_id, stream=True):
        # Read past the cap (the command must not block on a full pipe), keep nothing more.
        if len(output) <= MAX_LISTING_BYTES:
            output += chunk
    if len(output) > MAX_LISTING_BYTES:
        raise SandboxTamperedError(
            f"the container holds more files than the check reads (over {MAX_LISTING_BYTES // 2**20} "
            "MiB of listing)"
        )
    state = api.exec_inspect(exec_id)
    return bytes(output) if state.get("Pid") or output else None


def _started_output(api: docker.APIClient, container: str, argv: list[str]) -> bytes:
    """`_output`, tried again when the runtime failed to start the exec (see execs._run)."""
    for attempt in range(_START_TRIES):
        output = _output(api, container, argv)
        if output is not None:
            return output
        time.sleep(0.1 * 2**attempt)
    raise ListingError("the listing could not be started in the container")


def take(api: docker.APIClient, container: str, scope: ProtectedPaths) -> Listing:
    for attempt in range(1, _PARSE_TRIES + 1):
        nonce = secrets.token_hex(16)
        output = _started_output(api, container, platform_shell(script(nonce, scope)))
        try:
            files, now = parse(output, nonce)
        except ListingError:
            # Once in the suite, the engine's stream framing slipped and a frame header landed inside
            # a record. No file name can forge a record (the nonce), so a malformed one is the
            # transport's: list again; the same twice, and the check fails closed.
            if attempt < _PARSE_TRIES:
                continue
            raise
        return Listing(files, now, time.monotonic(), scope)
    raise ListingError("the listing could not be read")


def _image_digest(api: docker.APIClient, container: str, listing: Listing) -> ImageDigest | None:
    """The image's digest, taken in `container` right after its listing; None if it cannot be (the
    check then lists in full every time)."""
    found = digest_roots(listing)
    if found is None:
        return None
    roots, files = found
    script = f"{_digest_script(roots, files)}; {_presence_script(roots)}"
    try:
        output = _started_output(api, container, platform_shell(script)).decode("ascii", "replace")
    except ListingError:
        return None
    line, _, present = output.partition("\n")
    if not line.startswith(f"{_DIGEST_LINE} ") or not present.endswith("\n"):
        return None
    present = present[:-1]
    bits = present if len(present) == len(roots) and set(present) <= {"0", "1"} else None
    return ImageDigest(roots, files, line[len(_DIGEST_LINE) + 1 :], bits)


def of_image(api: docker.APIClient, container: str, image_id: str) -> Listing:
    """The image's listing: kept, else taken from `container`, which has just started and in which
    nothing but the image's own ENTRYPOINT has run (of the files its PATH makes protected)."""
    with _images_lock:
        lock = _per_image.setdefault(image_id, threading.Lock())
    with lock:
        with _images_lock:
            if image_id in _images:
                _images.move_to_end(image_id)
                return _images[image_id]
        listing = take(api, container, ProtectedPaths.of_image(api.inspect_image(image_id)))
        listing = dataclasses.replace(listing, digest=_image_digest(api, container, listing))
        with _images_lock:
            _images[image_id] = listing
            while len(_images) > _MAX_IMAGES:
                gone, _ = _images.popitem(last=False)
                _per_image.pop(gone, None)
        return listing


def known(image_id: str) -> Listing | None:
    with _images_lock:
        return _images.get(image_id)


def seconds_to_wait(listing: Listing) -> float:
    """How long to wait before the agent may run, so that no change it makes falls in the second of
    the image's newest file (the only change a listing could miss)."""
    if listing.now > listing.newest:
        return 0.0
    return max(0.0, listing.taken_at + 1.0 + (listing.newest - listing.now) - time.monotonic())


def changes(image: dict[str, Record], container: dict[str, Record]) -> list[tuple[str, int]]:
    """The engine's changes (path, kind) between two listings: a deleted folder once, not its files."""
    found = [
        (path, ADDED if path not in image else MODIFIED)
        for path, record in container.items()
        if image.get(path) != record
    ]
    for path in image:
        if path in container:
            continue
        parent = posixpath.dirname(path)
        if parent != path and parent in image and parent not in container:
            continue
        found.append((path, DELETED))
    return found
