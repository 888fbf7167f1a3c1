"""Sealed secrets and key derivation (regatta_shared.security.sealing): pure, no I/O."""

from __future__ import annotations

import base64

import pytest
from regatta_shared.events import AgentSpec, ModelSpec
from regatta_shared.messaging.jobs import AttemptJob
from regatta_shared.security.sealing import (
    SEALED_SECRETS,
    SealError,
    decrypt,
    derive_key,
    encrypt,
    job_envelope,
    new_run_key,
    open_job_secrets_with_key,
    seal,
    seal_for_run,
    unseal,
    wrap_run_key,
)

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


def _job(run_id: str, sealed: str | None) -> AttemptJob:
    agent = AgentSpec(index=0, harness="oracle", model=ModelSpec(type="hosted", base_model="none"))
    return AttemptJob(
        run_id=run_id, attempt_id="att_1", agent=agent, task="t", task_digest="d", attempt_index=0,
        sealed_secrets=sealed,
    )  # fmt: skip


def test_run_secrets_open_only_through_the_run_key_and_only_for_their_run() -> None:
    key = derive_key(MASTER, SEALED_SECRETS)
    run_key = new_run_key()
    blob = seal_for_run({"API_KEY": "sk-run-only"}, run_key, "run_a")
    assert blob.startswith("run1.") and "sk-run-only" not in blob
    wrapped = wrap_run_key(run_key, key, "run_a")
    envelope = job_envelope("run_a", wrapped, blob)
    assert open_job_secrets_with_key(_job("run_a", envelope), key) == {"API_KEY": "sk-run-only"}
    # The executor's plain `unseal` with the sealing subkey understands envelopes too.
    assert unseal(envelope, key) == {"API_KEY": "sk-run-only"}
    # The stored blob alone opens with nothing the deployment keeps once the run key is gone.
    for attempt in (lambda: unseal(blob, key), lambda: open_job_secrets_with_key(_job("run_a", blob), key)):
        with pytest.raises(SealError):
            attempt()
    with pytest.raises(SealError):
        decrypt("v1." + blob[len("run1.") :], key)
    # Bound to the run: another run's job, key or blob does not open it.
    with pytest.raises(SealError):
        open_job_secrets_with_key(_job("run_b", envelope), key)
    with pytest.raises(SealError):
        unseal(job_envelope("run_b", wrapped, blob), key)
    other = new_run_key()
    mixed = job_envelope("run_a", wrap_run_key(other, key, "run_a"), blob)
    with pytest.raises(SealError):
        unseal(mixed, key)
    with pytest.raises(SealError):
        unseal(envelope, derive_key(b"another-master-key-000", SEALED_SECRETS))
    with pytest.raises(SealError):
        unseal("env1.not-base64-json", key)


def test_jobs_without_secrets_and_legacy_jobs_still_open() -> None:
    key = derive_key(MASTER, SEALED_SECRETS)
    assert open_job_secrets_with_key(_job("run_a", None), key) == {}
    legacy = seal({"OLD": "sealed-before-run-keys"}, key)
    assert open_job_secrets_with_key(_job("run_a", legacy), key) == {"OLD": "sealed-before-run-keys"}
