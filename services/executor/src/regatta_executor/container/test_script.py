"""Harbor's run of the test script in a shared verifier's container (as root, the platform's shell
mounted): one exec that first checks what else wrote the verifier's files (integrity/verifier_files.py)
and, once the test ends, archives /logs/verifier on its own output, behind a marker, so the archive answers
Harbor's read of that folder right after without an engine round trip of its own."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from regatta_executor.attempt.integrity_record import IntegrityLog
from regatta_executor.container.exec import tools
from regatta_executor.container.exec.harbor_commands import VERIFIER_LOGS
from regatta_executor.container.files import snapshots
from regatta_executor.container.files.transfers import SNAPSHOT_MAX_BYTES
from regatta_executor.container.integrity import verifier_files

# Harbor's test command ($1) in the verifier's shell ($3: the image's bash, or the platform's under
# `enforce`), after the check of what else wrote the verifier's files ($4, on standard error); then, under
# a marker ($2) on the same output, /logs/verifier archived; the exec exits as the command did.
_THEN_VERIFIER_LOGS = f"""eval "$4"
"$3" -c "$1"
status=$?
echo "$2"
{snapshots.archive_command(tools.BUSYBOX, str(VERIFIER_LOGS))} 2>/dev/null
exit $status
"""


@dataclass
class TestScriptRun:
    """The exec's argv, the stream that takes the archive off its standard output, and the check's nonce."""

    argv: list[str]
    logs: snapshots.MarkedSnapshotStream
    check: str

    @classmethod
    def wrapping(cls, command: str, shell: str, download_budget: int) -> TestScriptRun:
        marker = f"regatta-verifier-logs-{secrets.token_hex(16)}"
        check = secrets.token_hex(16)
        logs = snapshots.MarkedSnapshotStream(
            str(VERIFIER_LOGS), min(download_budget, SNAPSHOT_MAX_BYTES), marker
        )
        argv = tools.platform_shell(
            _THEN_VERIFIER_LOGS, command, marker, shell, verifier_files.check_command(check)
        )
        return cls(argv, logs, check)

    def written(self, stderr: str, tests_uploaded: dict[str, str] | None, integrity: IntegrityLog) -> str:
        """The command's own standard error; what else wrote the verifier's files goes to the evidence."""
        written, stderr = verifier_files.written_by_another(stderr, self.check, tests_uploaded)
        if written:
            integrity.verifier_files_written(written)
        return stderr
