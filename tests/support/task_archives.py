"""Task folders and archives for the task browser's tests: a Harbor task whose instruction is an attack,
and tar.gz archives written as registry-sync writes them, or as an attacker would."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

ATTACK_INSTRUCTION = """# Fix the parser

Make `parse()` accept **empty** input.

<script>window.__pwned = 1</script>
<iframe src="https://attacker.example/"></iframe>
<img src=x onerror="window.__pwned = 2">

[click me](javascript:window.__pwned=3) and [the docs](https://example.com/docs)
"""
TASK_TOML = """version = "1.0"

[metadata]
category = "parsing"
difficulty = "hard"

[environment]
cpus = 2
memory_mb = 3072
storage_mb = 4096

[verifier]
timeout_sec = 60
"""
SOLUTION = "#!/bin/sh\necho the-secret-solution > /app/answer\n"
BIG_LINES = 30_000  # ~330 KB of text: past the 256 KiB shown


def task_files(instruction: str = ATTACK_INSTRUCTION) -> dict[str, bytes]:
    return {
        "instruction.md": instruction.encode(),
        "task.toml": TASK_TOML.encode(),
        "environment/Dockerfile": b"FROM regatta-test-base:bookworm\nWORKDIR /app\n",
        "environment/data.bin": bytes(range(256)) * 4,
        "environment/big.txt": "".join(f"line {i:06d}\n" for i in range(BIG_LINES)).encode(),
        "tests/test.sh": b"#!/bin/sh\ntest -f /app/answer && echo 1 > /logs/verifier/reward.txt\n",
        "solution/solve.sh": SOLUTION.encode(),
    }


def write_task(folder: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        if name.endswith(".sh"):
            path.chmod(0o755)
    return folder


def archive(files: dict[str, bytes]) -> bytes:
    """A tar.gz of `files`, each name written as given (`../x` too: tarfile checks nothing on write)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files.items():
            member = tarfile.TarInfo(name)
            member.size = len(data)
            member.mode = 0o644
            tar.addfile(member, io.BytesIO(data))
    return buffer.getvalue()
