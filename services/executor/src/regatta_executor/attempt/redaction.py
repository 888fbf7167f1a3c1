"""Secret values out of everything an attempt leaves: files, reports, error messages.

An agent (or a library it uses) may write a secret in any encoding a file can hold, so each value is
looked for as itself and as every common encoding of it: JSON-escaped (both ASCII-only and not, either
case of `\\u` escapes), URL-encoded (`quote`, `quote_plus`, either hex case), base64 (standard and
URL-safe, at each of the three byte alignments a value can start at inside a larger encoded blob),
shell-quoted (`shlex.quote`, and escaped for double quotes), and Harbor's partial masks
(`harbor.utils.env.redact_sensitive_value`'s `RTSE****c1d`, `agent_auth_resolution`'s `********c1d0`),
which give away part of the value.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
from collections.abc import Iterable
from urllib.parse import quote, quote_plus

REDACTED = "[REDACTED]"
# Encoded forms shorter than this are not looked for on their own: a base64 run of 4 characters would
# match all over unrelated files. A value this short is redacted only in its plain forms.
_MIN_FORM = 8
_UNICODE_ESCAPE = re.compile(r"\\u([0-9a-f]{4})")


def _json_forms(value: str) -> set[str]:
    forms = {json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]}
    return forms | {_UNICODE_ESCAPE.sub(lambda m: "\\u" + m[1].upper(), form) for form in forms}


def _url_forms(value: str) -> set[str]:
    forms = {quote(value, safe=""), quote(value), quote_plus(value)}
    return forms | {re.sub(r"%[0-9A-F]{2}", lambda m: m[0].lower(), form) for form in forms}


def _base64_forms(raw: bytes) -> set[str]:
    """The part of base64(prefix + raw + suffix) that depends only on `raw`, for each alignment."""
    forms = set()
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + raw).decode()
        start = -(-8 * offset // 6)  # the first character made only of raw's bits
        end = 8 * (offset + len(raw)) // 6  # one past the last such character
        inner = encoded[start:end]
        forms |= {inner, inner.replace("+", "-").replace("/", "_")}
    return forms


def _shell_forms(value: str) -> set[str]:
    double_quoted = re.sub(r'(["\\$`])', r"\\\1", value)
    return {shlex.quote(value), double_quoted}


def _harbor_masks(value: str) -> set[str]:
    masks = {"********" + value[-4:]} if len(value) > 4 else set()
    if len(value) > 8:
        masks.add(value[:4] + "****" + value[-3:])
    return masks


def forms(value: str) -> set[bytes]:
    """Every byte string under which `value` may appear in a file."""
    if not value:
        return set()
    plain = {value, *_json_forms(value), *_shell_forms(value), *_harbor_masks(value)}
    plain |= {form for mask in _harbor_masks(value) for form in _json_forms(mask)}
    encoded = {*_url_forms(value), *_base64_forms(value.encode())}
    found = {form.encode() for form in plain}
    found |= {form.encode() for form in encoded if len(form) >= _MIN_FORM}
    return {form for form in found if form}


class Redactor:
    """Replaces every form of every secret value; longest first, so no form is left half-replaced."""

    def __init__(self, secrets: Iterable[str]) -> None:
        found = set().union(*(forms(value) for value in secrets if value))
        ordered = sorted(found, key=len, reverse=True)
        # What a stream redacted in pieces may end with and still be the start of a form (live_output.py).
        self.longest = len(ordered[0]) if ordered else 0
        self._starts = {form[:k] for form in ordered for k in range(1, len(form))}
        self._pattern = re.compile(b"|".join(re.escape(form) for form in ordered)) if ordered else None

    def bytes(self, data: bytes) -> bytes:
        return self._pattern.sub(REDACTED.encode(), data) if self._pattern else data

    def spans(self, data: bytes) -> list[tuple[int, int]]:
        """Where secret forms occur in `data` (start, end), as `bytes` would replace them."""
        return [m.span() for m in self._pattern.finditer(data)] if self._pattern else []

    def unfinished(self, data: bytes) -> int:
        """The length of the longest end of `data` that begins some form: a secret perhaps cut there."""
        for length in range(min(self.longest - 1, len(data)), 0, -1):
            if data[-length:] in self._starts:
                return length
        return 0

    def text(self, text: str | None) -> str | None:
        if text is None or self._pattern is None:
            return text
        return self.bytes(text.encode("utf-8", "surrogatepass")).decode("utf-8", "replace")


def strip_recorded_env(result_json: bytes) -> bytes:
    """Harbor's result.json records the trial's config, with the agent's, the environment's and the
    verifier's env (sensitive names masked, the others in plain text): every value there is dropped,
    the names kept. Not JSON (never written so by Harbor): returned as is for the byte redaction."""
    try:
        document = json.loads(result_json)
    except ValueError:
        return result_json
    return json.dumps(_without_env_values(document), indent=2).encode()


def _without_env_values(node: object) -> object:
    if isinstance(node, dict):
        return {
            key: {name: REDACTED for name in value}
            if key == "env" and isinstance(value, dict)
            else _without_env_values(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_without_env_values(item) for item in node]
    return node
