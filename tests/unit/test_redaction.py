"""Secret redaction of attempt files (issue 18, finding 4): every encoding a value can take in a file.

The encodings are produced here with the standard library, embedded in surrounding text, and decoded
back by the test after redaction: a form the redaction misses shows up as the value itself."""

from __future__ import annotations

import base64
import json
import shlex
from urllib.parse import quote, quote_plus

from hypothesis import given, settings
from hypothesis import strategies as st
from regatta_executor.attempt.artifacts import redact_bytes
from regatta_executor.attempt.outcome import redact
from regatta_executor.attempt.redaction import REDACTED

HOSTILE = ['key-"quoted"-\\back\\slash-ünï€-c1d0', "it's $HOME `cmd` & a+b=c/d?e", "RTSE-0123456789abc"]


def encodings(value: str) -> dict[str, bytes]:
    raw = value.encode()
    found = {
        "raw": raw,
        "json": json.dumps(value).encode(),
        "json-utf8": json.dumps(value, ensure_ascii=False).encode(),
        "url": quote(value, safe="").encode(),
        "url-plus": quote_plus(value).encode(),
        "shell": shlex.quote(value).encode(),
        "harbor-mask": (value[:4] + "****" + value[-3:]).encode(),
        "auth-mask": ("********" + value[-4:]).encode(),
    }
    for prefix in (b"", b"x", b"xy"):
        found[f"base64+{len(prefix)}"] = base64.b64encode(prefix + raw + b"tail")
        found[f"base64url+{len(prefix)}"] = base64.urlsafe_b64encode(prefix + raw)
    return found


def decodes_to(value: str, piece: bytes) -> bool:
    """Whether any alignment of the base64 `piece` decodes to something holding `value`."""
    for start in range(4):
        chunk = piece[start:]
        chunk = chunk[: len(chunk) - len(chunk) % 4]
        if value.encode() in base64.b64decode(chunk):
            return True
    return False


def test_every_encoding_of_a_hostile_value_is_redacted() -> None:
    for value in HOSTILE:
        for name, form in encodings(value).items():
            data = b"before " + form + b" after"
            redacted = redact_bytes(data, [value])
            assert REDACTED.encode() in redacted, (value, name, redacted)
            assert form not in redacted and value.encode() not in redacted, (value, name, redacted)
            assert value[-4:].encode() not in redacted.replace(b"after", b""), (value, name, redacted)


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=9, max_size=40).filter(lambda v: "\x00" not in v), st.binary(max_size=5))
def test_any_value_at_any_base64_alignment_is_redacted(value: str, prefix: bytes) -> None:
    blob = base64.b64encode(prefix + value.encode() + b"suffix")
    redacted = redact_bytes(blob, [value])
    assert REDACTED.encode() in redacted
    for piece in redacted.split(REDACTED.encode()):
        # What is left of the blob around the redaction can no longer decode to the value.
        assert not decodes_to(value, piece)


def test_result_json_keeps_env_names_and_drops_every_value() -> None:
    record = {
        "config": {
            "agent": {"env": {"OPENAI_API_KEY": "sk-****abc", "PLAIN": "not-secret-value"}},
            "verifier": {"env": {"V": "x"}},
        },
        "reward": 1,
    }
    stripped = json.loads(redact_bytes(json.dumps(record).encode(), [], "result.json"))
    assert stripped["config"]["agent"]["env"] == {"OPENAI_API_KEY": REDACTED, "PLAIN": REDACTED}
    assert stripped["config"]["verifier"]["env"] == {"V": REDACTED}
    assert stripped["reward"] == 1


def test_messages_in_reports_are_redacted_in_every_encoding() -> None:
    value = HOSTILE[0]
    message = f"failed with {json.dumps(value)} and {quote(value)}"
    assert redact(message, {"K": value}) == f'failed with "{REDACTED}" and {REDACTED}'
