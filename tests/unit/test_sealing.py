"""Sealed secrets and key derivation (regatta_shared.sealing): pure, no I/O."""

from __future__ import annotations

import base64

import pytest
from regatta_shared.sealing import SEALED_SECRETS, SealError, decrypt, derive_key, encrypt, seal, unseal

MASTER = b"a-master-key-for-unit-tests"


def test_seal_round_trips_and_hides_the_values() -> None:
    key = derive_key(MASTER, SEALED_SECRETS)
    token = seal({"OPENAI_API_KEY": "sk-live-123", "EMPTY": ""}, key)
    assert token.startswith("v1.") and "sk-live-123" not in token
    assert unseal(token, key) == {"OPENAI_API_KEY": "sk-live-123", "EMPTY": ""}
    assert seal({"A": "b"}, key) != seal({"A": "b"}, key)  # fresh nonce every time


def test_unseal_refuses_another_key_a_tampered_token_and_other_formats() -> None:
    key = derive_key(MASTER, SEALED_SECRETS)
    token = seal({"A": "b"}, key)
    with pytest.raises(SealError):
        unseal(token, derive_key(b"another-master-key-000", SEALED_SECRETS))
    raw = bytearray(base64.urlsafe_b64decode(token[3:]))
    raw[len(raw) // 2] ^= 0x01
    flipped = "v1." + base64.urlsafe_b64encode(bytes(raw)).decode()
    with pytest.raises(SealError):
        unseal(flipped, key)
    with pytest.raises(SealError):
        unseal("gAAAA-not-ours", key)


def test_subkeys_differ_per_purpose_and_are_stable() -> None:
    assert derive_key(MASTER, "a") == derive_key(MASTER, "a")
    assert derive_key(MASTER, "a") != derive_key(MASTER, "b")
    assert len(derive_key(MASTER, "a")) == 32


def test_associated_data_binds_a_ciphertext_to_its_record() -> None:
    key = derive_key(MASTER, "records")
    token = encrypt(b"value", key, b"ws1|workspace||NAME")
    assert decrypt(token, key, b"ws1|workspace||NAME") == b"value"
    with pytest.raises(SealError):
        decrypt(token, key, b"ws2|workspace||NAME")
