"""What explains a change to the verifier's tool chain (container/integrity/toolchain_records.py), what the
platform
reads of the verifier's files (verifier_files.py) and of the agent's processes (processes.parse_alive): the
pure parts of issue 36's evidence, on records written as dpkg, pip and the loader write them."""

from __future__ import annotations

import base64
import hashlib

from regatta_executor.container.exec.processes import parse_alive
from regatta_executor.container.integrity.toolchain_records import (
    Observed,
    Records,
    add_dpkg,
    add_pip_record,
    bytecode_source,
    explain,
    loader_cache_libraries,
    spellings,
)
from regatta_executor.container.integrity.verifier_files import written_by_another

SITE = "/usr/local/lib/python3.11/dist-packages"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _seen(data: bytes) -> Observed:
    return Observed(
        sha256=hashlib.sha256(data).hexdigest(), md5=hashlib.md5(data).hexdigest(), size=len(data)
    )


def test_a_file_is_explained_by_the_pip_record_that_lists_its_hash_and_size() -> None:
    records = Records()
    code, script = b'VERSION = "2.0"\n', b"#!/usr/bin/python3\n"
    add_pip_record(
        records,
        f"{SITE}/mylib-2.0.dist-info/RECORD",
        f"mylib/__init__.py,sha256={_b64(code)},{len(code)}\n"
        f"../../../bin/mylib,sha256={_b64(script)},{len(script)}\n"
        "mylib-2.0.dist-info/RECORD,,\n",
    )
    explained = explain(f"{SITE}/mylib/__init__.py", "file", _seen(code), records)
    assert explained is not None and (explained.source, explained.package) == ("pip", "mylib-2.0")
    # A console script, relative to the site folder: /usr/local/bin.
    assert explain("/usr/local/bin/mylib", "file", _seen(script), records) is not None
    # RECORD lists itself without a hash.
    assert explain(f"{SITE}/mylib-2.0.dist-info/RECORD", "file", _seen(b"x"), records) is not None
    # Other bytes at the same path, or the right bytes elsewhere, are not explained.
    assert explain(f"{SITE}/mylib/__init__.py", "file", _seen(b"evil\n"), records) is None
    assert explain(f"{SITE}/other/__init__.py", "file", _seen(code), records) is None
    # Only RECORD may go without a hash: a line without one explains nothing else.
    add_pip_record(records, f"{SITE}/x-1.dist-info/RECORD", "x/evil.py,,\n")
    assert explain(f"{SITE}/x/evil.py", "file", _seen(b"anything"), records) is None


def test_dpkg_records_explain_by_md5_under_both_spellings_of_merged_usr() -> None:
    records = Records()
    bash = b"\x7fELF bash"
    add_dpkg(records, "bash.md5sums", f"{hashlib.md5(bash).hexdigest()}  bin/bash\n")
    add_dpkg(records, "bash.list", "/.\n/bin\n/bin/rbash\n")
    explained = explain("/usr/bin/bash", "file", _seen(bash), records)
    assert explained is not None and (explained.source, explained.package) == ("dpkg", "bash")
    assert explain("/usr/bin/bash", "file", _seen(b"trojan"), records) is None
    assert explain("/usr/bin/rbash", "symlink", None, records) is not None  # a symlink: named in the list
    # A file name that is no package's is ignored (the agent can make any file in dpkg's folder).
    add_dpkg(records, "Evil Name.md5sums", f"{hashlib.md5(b'x').hexdigest()}  usr/bin/x\n")
    assert explain("/usr/bin/x", "file", _seen(b"x"), records) is None
    assert spellings("/lib/x86_64-linux-gnu/libc.so.6") == (
        "/lib/x86_64-linux-gnu/libc.so.6",
        "/usr/lib/x86_64-linux-gnu/libc.so.6",
    )
    assert spellings("/etc/ld.so.cache") == ("/etc/ld.so.cache",)


def test_byte_code_caches_name_their_source() -> None:
    assert (
        bytecode_source(f"{SITE}/mylib/__pycache__/__init__.cpython-311.pyc") == f"{SITE}/mylib/__init__.py"
    )
    assert bytecode_source(f"{SITE}/__pycache__/m.cpython-311.opt-1.pyc") == f"{SITE}/m.py"
    assert bytecode_source(f"{SITE}/mylib/evil.pyc") is None


def test_the_loader_caches_libraries_are_its_absolute_paths() -> None:
    cache = (
        b"glibc-ld.so.cache1.1\0\0\0libz.so.1\0/usr/lib/x86_64-linux-gnu/libz.so.1\0/opt/x/libtinfo.so.6\0"
    )
    assert loader_cache_libraries(cache) == ["/usr/lib/x86_64-linux-gnu/libz.so.1", "/opt/x/libtinfo.so.6"]


def test_verifier_files_written_by_another_hand() -> None:
    nonce = "n0nce"
    uploaded = {"/tests/test.sh": "a" * 64, "/tests/data.txt": "b" * 64}
    stderr = (
        f"{nonce} F {'c' * 64} /tests/test.sh\n"
        f"{nonce} F {'d' * 64} /tests/conftest.py\n"
        "a line of the command's own\n"
        f"{nonce} V /logs/verifier/reward.txt\n"
    )
    found, rest = written_by_another(stderr, nonce, uploaded)
    assert found == [
        "/logs/verifier/reward.txt (present before the verifier ran)",
        "/tests/conftest.py (added after the platform's upload)",
        "/tests/test.sh (changed after the platform's upload)",
        "/tests/data.txt (removed after the platform's upload)",
    ]
    assert rest == "a line of the command's own\n"
    assert written_by_another(f"{nonce} F {'a' * 64} /tests/test.sh\n", nonce, None) == ([], "")


def test_the_agents_processes_alive_and_their_names_with_line_breaks() -> None:
    nonce = "n0nce"
    stderr = f"{nonce} 12 python3\tpython3 -m http.server\n{nonce} 13 x 1 (y) S\t\nother\n{nonce} count 2\n"
    alive, count, rest = parse_alive(stderr, nonce)
    assert [(p.pid, p.name, p.command) for p in alive] == [
        (12, "python3", "python3 -m http.server"),
        (13, "x 1 (y) S", ""),
    ]
    assert (count, rest) == (2, "other\n")
