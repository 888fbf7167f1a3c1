"""A gate a task's solution can wait on in a `local` sandbox: a file in the host's /opt, which local
sandboxes bind read-only (they see no host /tmp or /var). A test opens it when it has looked at the
attempt while it runs, instead of a solution that sleeps for longer than the test might need."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

NEVER_OPENED = "the gate never opened"


class Gate:
    def __init__(self) -> None:
        self.path = Path("/opt") / f"regatta-gate-{uuid.uuid4().hex}"

    def wait(self, timeout_sec: int = 45) -> str:
        """Shell lines that wait for the gate; if it never opens they say so in the agent's logs, where
        `NEVER_OPENED` can be looked for."""
        return (
            f"for _ in $(seq {timeout_sec * 10}); do [ -e {self.path} ] && break; sleep 0.1; done\n"
            f"[ -e {self.path} ] || echo '{NEVER_OPENED}' > /logs/agent/gate.txt\n"
        )

    def sleep_unless_open(self, seconds: int) -> str:
        """A shell line that sleeps for `seconds` while the gate is shut, and for one second once it is
        open (long enough to be reported started): a long attempt whose next delivery, after a restart,
        ends soon."""
        return f"if [ -e {self.path} ]; then sleep 1; else sleep {seconds}; fi\n"

    def open(self) -> None:
        self.path.touch()


@contextmanager
def gate() -> Iterator[Gate]:
    made = Gate()
    try:
        yield made
    finally:
        made.path.unlink(missing_ok=True)
