"""Who may speak for an attempt: reports and claims carry a MAC under the attempt's own key.

Anyone on the bus who can publish to `reports.attempt` (an executor's NATS user, or a task that reached
the bus) could otherwise report any run's attempt finished and passed. The run-scheduler derives a key
per attempt from the master key and puts it in the attempt's job sealed under the sealing subkey, like
the run's secrets; only an executor that received the job and holds the sealing key can open it. The
executor signs the exact bytes of each report (and claim) with it; the scheduler drops, and logs, any
report whose MAC does not verify. A key opens nothing but that attempt's reports: a leaked one cannot
speak for another attempt, another run, or another workspace.
"""

from __future__ import annotations

import hashlib
import hmac

from regatta_shared.security.sealing import SEALED_SECRETS, decrypt, derive_key, encrypt

ATTEMPT_REPORTS = "regatta/attempt-reports/v1"
MAC_HEADER = "Regatta-Attempt-Mac"


def _binding(run_id: str, attempt_id: str) -> bytes:
    return f"regatta-attempt\x1f{run_id}\x1f{attempt_id}".encode()


def sign(key: bytes, payload: bytes) -> str:
    return hmac.new(key, payload, hashlib.sha256).hexdigest()


class AttemptKeys:
    """The scheduler's side: derives each attempt's key and seals it for the job."""

    def __init__(self, master: bytes) -> None:
        self._root = derive_key(master, ATTEMPT_REPORTS)
        self._sealing = derive_key(master, SEALED_SECRETS)

    def key(self, run_id: str, attempt_id: str) -> bytes:
        return hmac.new(self._root, _binding(run_id, attempt_id), hashlib.sha256).digest()

    def sealed_key(self, run_id: str, attempt_id: str) -> str:
        """What the job carries: the attempt key, opened only with the sealing key (open_key)."""
        return encrypt(self.key(run_id, attempt_id), self._sealing, _binding(run_id, attempt_id))

    def verify(self, run_id: str, attempt_id: str, payload: bytes, mac: str | None) -> bool:
        if not mac:
            return False
        return hmac.compare_digest(sign(self.key(run_id, attempt_id), payload), mac)


def open_key(sealed: str, sealing_key: bytes, run_id: str, attempt_id: str) -> bytes:
    """The executor's side. Raises sealing.SealError if the token is not this attempt's."""
    return decrypt(sealed, sealing_key, _binding(run_id, attempt_id))
