"""Whether /tests and the reward files were written by anything but the platform's upload and the
verifier's own run: evidence under the `record` policy, where the agent's processes keep running into
verification as under Harbor (attempt/integrity_record.py).

The platform knows what it uploaded into /tests (the SHA-256 of each file, from the host's copy). Right
before Harbor's test script starts, in the same exec of the platform's shell, /tests is hashed and
/logs/verifier (emptied when the agent's turn ended) listed, on standard error under a nonce: a file
added, changed or removed in /tests, or anything already in /logs/verifier, was written by another hand
between the platform's upload and the verifier's start. (What is written while the script runs cannot
be told from the script's own writes; docs/reliability.md says so.)
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import shlex
from pathlib import Path

from regatta_executor.container.exec.harbor_commands import TESTS, VERIFIER_LOGS
from regatta_executor.container.exec.tools import BUSYBOX, SHELL

MAX_HASHED = 2000


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def hash_upload(source: Path, target: str, *, single: bool) -> dict[str, str]:
    """Container path -> SHA-256 of the regular files an upload of `source` to `target` writes."""
    if single:
        return {target: _sha256(source)} if source.is_file() and not source.is_symlink() else {}
    found: dict[str, str] = {}
    for folder, _dirs, names in os.walk(source):
        for name in names:
            path = Path(folder, name)
            if path.is_symlink() or not path.is_file() or len(found) >= MAX_HASHED:
                continue
            relative = path.relative_to(source).as_posix()
            found[posixpath.join(target, relative)] = _sha256(path)
    return found


def check_command(nonce: str) -> str:
    """Shell commands (for the platform's shell) that print, on standard error, each file of /tests
    with its SHA-256 and each entry of /logs/verifier, each record under the nonce."""
    each = shlex.quote(f'for f do echo "$0 F $({BUSYBOX} sha256sum < "$f" | {BUSYBOX} cut -c1-64) $f"; done')
    listed = shlex.quote('for f do echo "$0 V $f"; done')
    return (
        f"{{ {BUSYBOX} find {TESTS} ! -type d -exec {SHELL} -c {each} {nonce} {{}} + ; "
        f"{BUSYBOX} find {VERIFIER_LOGS} -mindepth 1 -exec {SHELL} -c {listed} {nonce} {{}} + ; }} >&2 "
        "2>/dev/null"
    )


def written_by_another(stderr: str, nonce: str, uploaded: dict[str, str] | None) -> tuple[list[str], str]:
    """What `check_command` found that the platform did not write, and the rest of standard error.
    `uploaded`: what the platform wrote into /tests (None: it uploaded nothing, /tests is not judged)."""
    head = nonce + " "
    tests: dict[str, str] = {}
    present: list[str] = []
    rest: list[str] = []
    current: list[str] | None = None
    for line in stderr.splitlines(keepends=True):
        if line.startswith(head):
            kind, _, value = line[len(head) :].rstrip("\n").partition(" ")
            if kind == "F":
                digest, _, path = value.partition(" ")
                tests[path] = digest
                current = None
            elif kind == "V":
                present.append(value)
                current = present
            continue
        if current is not None and current:
            current[-1] += "\n" + line.rstrip("\n")  # a name with a line break
            continue
        rest.append(line)
    found: list[str] = [f"{path} (present before the verifier ran)" for path in present]
    if uploaded is not None:
        for path, digest in sorted(tests.items()):
            if path not in uploaded:
                found.append(f"{path} (added after the platform's upload)")
            elif uploaded[path] != digest:
                found.append(f"{path} (changed after the platform's upload)")
        found += [
            f"{path} (removed after the platform's upload)" for path in sorted(set(uploaded) - set(tests))
        ]
    return found, "".join(rest)
