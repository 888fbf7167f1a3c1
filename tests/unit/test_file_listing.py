"""The tamper check's listing (container/integrity/file_listing.py): records only from the nonce, names with
line breaks kept whole, and the changes between two listings as the engine would name them."""

from __future__ import annotations

import time

import pytest
from regatta_executor.container.integrity.file_listing import (
    ADDED,
    DELETED,
    MODIFIED,
    ImageDigest,
    Listing,
    ListingError,
    changes,
    digest_roots,
    parse,
    seconds_to_wait,
    unchanged,
)
from regatta_executor.container.integrity.protected_paths import ProtectedPaths

NONCE = "0123456789abcdef0123456789abcdef"
SCOPE = ProtectedPaths(("/usr/local/bin", "/usr/bin", "/bin"))


def record(path: str, ctime: int = 100, mode: str = "81ed", size: int = 5) -> bytes:
    return f"{NONCE} {ctime} {mode} 0 0 {size} {path}\n".encode()


def test_a_name_with_a_line_break_cannot_forge_a_record() -> None:
    # The agent named a file so that its second line reads like the record of an unchanged bash.
    forged = "/tmp/x\n1 81ed 0 0 5 /usr/bin/bash"
    output = record("/usr/bin/bash", ctime=200) + record(forged) + f"{NONCE} end 300\n".encode()
    files, now = parse(output, NONCE)
    assert now == 300
    assert files["/usr/bin/bash"] == (200, 0x81ED, 0, 0, 5)
    assert forged in files
    assert len(files) == 2


def test_a_listing_that_did_not_finish_or_names_a_path_twice_is_refused() -> None:
    with pytest.raises(ListingError, match="did not finish"):
        parse(record("/usr/bin/bash"), NONCE)
    with pytest.raises(ListingError, match="twice"):
        parse(record("/a") + record("/a") + f"{NONCE} end 1\n".encode(), NONCE)
    with pytest.raises(ListingError, match="malformed"):
        parse(f"{NONCE} 1 81ed /a\n{NONCE} end 1\n".encode(), NONCE)
    # The engine's stream framing slipped once in the suite: a frame header inside a record's mode.
    slipped = f"{NONCE} 1 ".encode() + b"\x01\x00\x00\x00\x00\x00\x10\x0081a4 0 0 5 /a\n"
    with pytest.raises(ListingError, match="malformed"):
        parse(slipped + f"{NONCE} end 1\n".encode(), NONCE)


def test_changes_name_what_the_engine_would() -> None:
    image = {
        "/": (1, 0x41ED, 0, 0, 4096),
        "/usr/bin": (1, 0x41ED, 0, 0, 4096),
        "/usr/bin/bash": (1, 0x81ED, 0, 0, 5),
        "/usr/bin/sh": (1, 0xA1FF, 0, 0, 4),
        "/usr/lib/x": (1, 0x41ED, 0, 0, 4096),
        "/usr/lib/x/libz.so.1": (1, 0x81ED, 0, 0, 9),
        "/usr/lib/x/libm.so.6": (1, 0x81ED, 0, 0, 9),
    }
    container = {
        "/": (1, 0x41ED, 0, 0, 4096),
        "/usr/bin": (7, 0x41ED, 0, 0, 4096),  # an entry went
        "/usr/bin/bash": (7, 0x81ED, 0, 0, 5),  # same size, mode and owner: only its ctime differs
        "/usr/bin/new": (7, 0x81ED, 0, 0, 3),
    }
    assert sorted(changes(image, container)) == [
        ("/usr/bin", MODIFIED),
        ("/usr/bin/bash", MODIFIED),
        ("/usr/bin/new", ADDED),
        ("/usr/bin/sh", DELETED),
        ("/usr/lib/x", DELETED),  # the folder once, not each of its files
    ]
    assert changes(image, dict(image)) == []


def test_an_image_made_this_second_makes_the_attempt_wait_for_the_next() -> None:
    now = time.monotonic()
    fresh = Listing({"/a": (50, 0x81ED, 0, 0, 1)}, now=50, taken_at=now, scope=SCOPE)
    assert 0.9 < seconds_to_wait(fresh) <= 1.0
    old = Listing({"/a": (40, 0x81ED, 0, 0, 1)}, now=50, taken_at=now, scope=SCOPE)
    assert seconds_to_wait(old) == 0.0


def test_the_digest_walks_the_protected_folders_and_names_the_images_other_protected_files() -> None:
    files = dict.fromkeys(
        ["/usr/bin", "/usr/bin/bash", "/lib", "/libx32", "/usr/lib", "/usr/lib/x/libz.so.1", "/usr/libexec",
         "/usr/local/lib", "/usr/local/libexec", "/opt/x/libq.so", "/etc/ld.so.cache", "/etc/ld.so.conf"],
        (1, 0x81ED, 0, 0, 1),
    )  # fmt: skip
    listing = Listing(files, now=2, taken_at=0.0, scope=SCOPE)
    found = digest_roots(listing)
    assert found is not None
    roots, named = found
    # Every PATH and library folder and the loader's files, present in the image or not (what an
    # agent adds there is judged), each once (none inside another); the rest of the image's one by one.
    assert set(roots) == {
        "/bin", "/usr/bin", "/usr/local/bin", "/lib", "/lib64", "/libx32", "/usr/lib", "/usr/lib64",
        "/usr/libexec", "/usr/local/lib", "/usr/local/libexec",
        "/etc/ld.so.preload", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/root/.local/lib",
    }  # fmt: skip
    assert named == ("/opt/x/libq.so",)  # the loader's cache is not protected (ldconfig rewrites it)
    many = Listing({f"/opt/{i:06}/libq.so": (1, 0x81ED, 0, 0, 1) for i in range(5000)}, 2, 0.0, SCOPE)
    assert digest_roots(many) is None  # too many to name in one command: the check lists in full
    # The digest's line, exactly, or a change.
    digest = ImageDigest(roots, named, "ab" * 32)
    listing = Listing(files, now=2, taken_at=0.0, scope=SCOPE, digest=digest)
    assert unchanged(listing, f"regatta-listing-sha256 {'ab' * 32}\n")
    for printed in ("", f"regatta-listing-sha256 {'ab' * 32}", f"x\nregatta-listing-sha256 {'ab' * 32}\n"):
        assert not unchanged(listing, printed)
    assert not unchanged(Listing(files, 2, 0.0, SCOPE), f"regatta-listing-sha256 {'ab' * 32}\n")


def test_the_protected_set_and_its_find_predicate() -> None:
    assert SCOPE.covers("/usr/bin/bash") and SCOPE.covers("/usr/local/bin")
    assert SCOPE.covers("/usr/lib64/ld.so") and SCOPE.covers("/opt/x/libz.so.1")
    assert SCOPE.covers("/etc/ld.so.preload") and SCOPE.covers("/etc/ld.so.conf.d/a.conf")
    assert not SCOPE.covers("/usr/binx/a") and not SCOPE.covers("/opt/x/a.sox")
    assert not SCOPE.covers("/usr/share/doc/a") and not SCOPE.covers("/etc/passwd")
    # The loader's cache and root's Python user site: the verifier's tool chain too (issue 36).
    assert SCOPE.covers("/etc/ld.so.cache") and SCOPE.covers("/etc/libx.so.1")
    assert SCOPE.covers("/root/.local/lib/python3.11/site-packages/a.pth") and not SCOPE.covers("/root/a")
    # A PATH from the image is quoted and glob-escaped; one holding / protects (and lists) everything.
    predicate = ProtectedPaths(("/srv/*'x",)).find_predicate()
    assert "-path '/srv/\\*'\"'\"'x'" in predicate
    assert ProtectedPaths(("/usr/bin", "/")).find_predicate() == ""
    assert ProtectedPaths(("/",)).covers("/anything")
