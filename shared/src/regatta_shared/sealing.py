"""The master key and what is derived from it; sealed secrets for executors (invariant 6).

Every process of a deployment reads the same master key: `REGATTA_MASTER_KEY`, or, in embedded mode,
`$REGATTA_DATA_DIR/master.key` (generated on first use, mode 0600). Each purpose gets its own subkey
(HKDF), so a key that leaks from one use (say, URL signing) does not open another (stored secrets).

A sealed token is `v1.` + base64url(nonce || AES-256-GCM ciphertext of the JSON values). It is safe in
the event log and job messages: without the master key it is noise.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from regatta_shared.settings import Settings

MASTER_KEY_FILE = "master.key"
MIN_MASTER_KEY_LENGTH = 16
SEALED_SECRETS = "regatta/sealed-secrets/v1"
_PREFIX = "v1."
_NONCE = 12


class SealError(ValueError):
    """A token that was not sealed with this key, or was altered."""


def load_master_key(master_key: str | None, data_dir: Path) -> bytes:
    """The configured key, else the data dir's key file, created once (atomically) if missing."""
    if master_key and master_key.strip():
        material = master_key.strip()
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
    values = json.loads(decrypt(token, key))
    if not isinstance(values, dict):
        raise SealError("sealed payload is not an object")
    return {str(k): str(v) for k, v in values.items()}
