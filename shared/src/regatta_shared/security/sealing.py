"""The master key and what is derived from it; sealed secrets for executors (invariant 6).

Every process of a deployment reads the same master key: `REGATTA_MASTER_KEY`, or, in embedded mode,
`$REGATTA_DATA_DIR/master.key` (generated on first use, mode 0600). Each purpose gets its own subkey
(HKDF), so a key that leaks from one use (say, URL signing) does not open another (stored secrets).

A sealed token is `v1.` + base64url(nonce || AES-256-GCM ciphertext of the JSON values). It is safe in
the event log and job messages: without the master key it is noise.

A run's secrets are crypto-shredded when the run ends (invariant 6). The event log is append-only, so
`RunSubmitted.sealed_secrets` is sealed with a random per-run data key (`run1.` tokens), never with a key
derived from the master key. That data key lives only in the `run_keys` table
(regatta_shared.security.run_keys),
wrapped under the sealing subkey; the run-scheduler copies it into each job as an envelope (`env1.`:
wrapped key + sealed values, bound to the run id) and deletes the row when the run ends. From then on the
blob in the log opens with nothing, the master key included. Executors open a job's secrets with
`open_job_secrets` (or `unseal` with the sealing key, which understands envelopes).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from regatta_shared.settings import Settings, refuse_known_default

if TYPE_CHECKING:
    from regatta_shared.messaging.jobs import AttemptJob

MASTER_KEY_FILE = "master.key"
MIN_MASTER_KEY_LENGTH = 16
SEALED_SECRETS = "regatta/sealed-secrets/v1"
_PREFIX = "v1."
_NONCE = 12
RUN_SEALED_PREFIX = "run1."  # sealed with a run's own data key
ENVELOPE_PREFIX = "env1."  # a job's copy: the wrapped run key and the run-sealed values
RUN_KEY_BYTES = 32


class SealError(ValueError):
    """A token that was not sealed with this key, or was altered."""


def load_master_key(master_key: str | None, data_dir: Path) -> bytes:
    """The configured key, else the data dir's key file, created once (atomically) if missing."""
    if master_key and master_key.strip():
        material = master_key.strip()
        refuse_known_default("REGATTA_MASTER_KEY", material)
        if len(material) < MIN_MASTER_KEY_LENGTH:
            raise ValueError(f"REGATTA_MASTER_KEY must be at least {MIN_MASTER_KEY_LENGTH} characters")
        return material.encode()
    path = data_dir / MASTER_KEY_FILE
    if not path.exists():
        _create_key_file(path)
    material = path.read_text().strip()
    if len(material) < MIN_MASTER_KEY_LENGTH:
        raise ValueError(f"{path} holds no usable master key")
    return material.encode()


def _create_key_file(path: Path) -> None:
    # Several processes of the embedded stack start at once: write a private temp file, then link it
    # into place, which fails if another process won. Nobody ever reads a half-written key.
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(32) + "\n")
        with contextlib.suppress(FileExistsError):
            os.link(temp, path)
    finally:
        temp.unlink(missing_ok=True)


def master_key(settings: Settings) -> bytes:
    return load_master_key(settings.master_key, settings.data_dir)


def derive_key(master: bytes, purpose: str) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=purpose.encode()).derive(master)


def sealing_key(settings: Settings) -> bytes:
    """The key that gateway (seal) and executors (unseal) share for a run's secrets."""
    return derive_key(master_key(settings), SEALED_SECRETS)


def encrypt(plaintext: bytes, key: bytes, associated: bytes = b"") -> str:
    nonce = os.urandom(_NONCE)
    sealed = AESGCM(key).encrypt(nonce, plaintext, associated or None)
    return _PREFIX + base64.urlsafe_b64encode(nonce + sealed).decode()


def decrypt(token: str, key: bytes, associated: bytes = b"") -> bytes:
    if not token.startswith(_PREFIX):
        raise SealError("unknown token format")
    try:
        raw = base64.urlsafe_b64decode(token[len(_PREFIX) :].encode())
        return AESGCM(key).decrypt(raw[:_NONCE], raw[_NONCE:], associated or None)
    except (InvalidTag, ValueError) as error:
        raise SealError("token does not open with this key") from error


def seal(values: dict[str, str], key: bytes) -> str:
    return encrypt(json.dumps(values, sort_keys=True).encode(), key)


def unseal(token: str, key: bytes) -> dict[str, str]:
    """A `v1.` token sealed with `key`, or a job's `env1.` envelope whose run key `key` unwraps."""
    if token.startswith(ENVELOPE_PREFIX):
        return _open_envelope(token, key)[1]
    if token.startswith(RUN_SEALED_PREFIX):
        raise SealError("sealed with the run's own key, which only a job envelope carries")
    return _values(decrypt(token, key))


def _values(plaintext: bytes) -> dict[str, str]:
    try:
        values = json.loads(plaintext)
    except ValueError as error:
        raise SealError("sealed payload is not JSON") from error
    if not isinstance(values, dict):
        raise SealError("sealed payload is not an object")
    return {str(k): str(v) for k, v in values.items()}


# --- per-run data keys (crypto-shredding) -------------------------------------------------------------


def _run_binding(run_id: str) -> bytes:
    # Associated data: a blob or a wrapped key copied onto another run does not open there.
    return f"regatta-run\x1f{run_id}".encode()


def _run_key_binding(run_id: str) -> bytes:
    return f"regatta-run-key\x1f{run_id}".encode()


def new_run_key() -> bytes:
    return AESGCM.generate_key(bit_length=8 * RUN_KEY_BYTES)


def seal_for_run(values: dict[str, str], run_key: bytes, run_id: str) -> str:
    """The blob stored in `RunSubmitted.sealed_secrets`: opens only with the run's data key."""
    token = encrypt(json.dumps(values, sort_keys=True).encode(), run_key, _run_binding(run_id))
    return RUN_SEALED_PREFIX + token[len(_PREFIX) :]


def open_for_run(sealed: str, run_key: bytes, run_id: str) -> dict[str, str]:
    if not sealed.startswith(RUN_SEALED_PREFIX):
        raise SealError("not sealed with a run key")
    return _values(decrypt(_PREFIX + sealed[len(RUN_SEALED_PREFIX) :], run_key, _run_binding(run_id)))


def wrap_run_key(run_key: bytes, key: bytes, run_id: str) -> str:
    """The run's data key under the sealing subkey (what the `run_keys` row holds)."""
    return encrypt(run_key, key, _run_key_binding(run_id))


def unwrap_run_key(wrapped: str, key: bytes, run_id: str) -> bytes:
    run_key = decrypt(wrapped, key, _run_key_binding(run_id))
    if len(run_key) != RUN_KEY_BYTES:
        raise SealError("wrapped run key has the wrong length")
    return run_key


def job_envelope(run_id: str, wrapped_key: str, sealed: str) -> str:
    """What a job carries (the scheduler builds it; jobs are not stored events)."""
    body = json.dumps({"run_id": run_id, "key": wrapped_key, "secrets": sealed}, sort_keys=True)
    return ENVELOPE_PREFIX + base64.urlsafe_b64encode(body.encode()).decode()


def _open_envelope(token: str, key: bytes) -> tuple[str, dict[str, str]]:
    try:
        body = json.loads(base64.urlsafe_b64decode(token[len(ENVELOPE_PREFIX) :].encode()))
        run_id, wrapped, sealed = str(body["run_id"]), str(body["key"]), str(body["secrets"])
    except (ValueError, KeyError, TypeError) as error:
        raise SealError("malformed job envelope") from error
    return run_id, open_for_run(sealed, unwrap_run_key(wrapped, key, run_id), run_id)


def open_job_secrets(job: AttemptJob, settings: Settings) -> dict[str, str]:
    """The single entry point for executors: a job's secrets as name -> value ({} when it has none).

    Raises SealError when they cannot be opened: another deployment's master key, a tampered or
    foreign envelope, or a run whose key was purged before this job was built.
    """
    return open_job_secrets_with_key(job, sealing_key(settings))


def open_job_secrets_with_key(job: AttemptJob, key: bytes) -> dict[str, str]:
    """`open_job_secrets` for a caller that already holds the sealing subkey (`sealing_key(settings)`)."""
    token = job.sealed_secrets
    if not token:
        return {}
    if token.startswith(ENVELOPE_PREFIX):
        run_id, values = _open_envelope(token, key)
        if run_id != job.run_id:
            raise SealError("the job carries another run's secrets")
        return values
    if token.startswith(RUN_SEALED_PREFIX):
        raise SealError("the run's secrets key is gone (purged when the run ended)")
    # Runs submitted before per-run keys existed: sealed directly with the sealing subkey.
    return unseal(token, key)
