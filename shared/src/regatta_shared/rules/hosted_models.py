"""Hosted models: OpenAI-compatible serving endpoints (vLLM, SGLang, …) the operator declares in
`REGATTA_HOSTED_MODELS`, which runs name by `{"type": "hosted", "base_model", "lora_model_name"}`.

    REGATTA_HOSTED_MODELS='[{"name": "Qwen/Qwen3-8B", "base_url": "http://vllm:8000/v1",
                             "api_key_env": "VLLM_API_KEY", "lora_adapters": ["my-lora"]}]'

The declaration is operator-trusted (its URL may be an internal address) but still checked for its kind
and size, each error naming its field. The key is never in the declaration: `api_key_env` names an
environment variable of the gateway, whose value is sealed into each run that uses the model, like any
run secret (regatta_shared.security.sealing), and redacted from what its attempts leave.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

SETTING = "REGATTA_HOSTED_MODELS"
MAX_MODELS = 100
MAX_ADAPTERS = 200
MAX_NAME = 200
MAX_URL = 2000
# Served model and adapter names as vLLM and SGLang accept them (`org/name`, `name:tag`, `name@rev`).
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@/+-]*$")
ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
FIELDS = {"name", "base_url", "api_key_env", "lora_adapters"}
# Sealed-secret name of an agent's hosted-model key: no secret record can be named so (they start with
# a capital letter), and the executor never puts such names in an agent's environment.
KEY_PREFIX = "_REGATTA_HOSTED_KEY_"


class HostedModelsError(ValueError):
    """A declaration that cannot be used; the message names the field."""


@dataclass(frozen=True)
class HostedModel:
    name: str
    base_url: str
    api_key_env: str | None = None
    lora_adapters: tuple[str, ...] = ()

    def public(self) -> dict[str, object]:
        """What the form and the API list: names and adapters (a run records the base URL it used)."""
        return {"name": self.name, "lora_adapters": list(self.lora_adapters)}


def key_name(agent_index: int) -> str:
    return f"{KEY_PREFIX}{agent_index}"


def is_key_name(name: str) -> bool:
    return name.startswith(KEY_PREFIX)


def parse(raw: str | None, environ: Mapping[str, str] | None = None) -> tuple[HostedModel, ...]:
    """The declared models, in order. Raises HostedModelsError naming the field of the first problem,
    including an `api_key_env` whose variable is unset or empty in `environ` (default: os.environ)."""
    if raw is None or not raw.strip():
        return ()
    environ = os.environ if environ is None else environ
    try:
        entries = json.loads(raw)
    except json.JSONDecodeError as error:
        raise HostedModelsError(f"{SETTING}: not JSON ({error.msg} at character {error.pos})") from None
    if not isinstance(entries, list):
        raise HostedModelsError(f"{SETTING}: must be a JSON list of models")
    if len(entries) > MAX_MODELS:
        raise HostedModelsError(f"{SETTING}: at most {MAX_MODELS} models")
    models: list[HostedModel] = []
    for index, entry in enumerate(entries):
        where = f"{SETTING}[{index}]"
        if not isinstance(entry, dict):
            raise HostedModelsError(f"{where}: must be an object with name and base_url")
        unknown = sorted(set(entry) - FIELDS)
        if unknown:
            allowed = ", ".join(sorted(FIELDS))
            raise HostedModelsError(f"{where}.{unknown[0][:80]}: unknown field (allowed: {allowed})")
        model = HostedModel(
            name=_name(entry.get("name"), f"{where}.name"),
            base_url=_url(entry.get("base_url"), f"{where}.base_url"),
            api_key_env=_key_env(entry.get("api_key_env"), f"{where}.api_key_env", environ),
            lora_adapters=_adapters(entry.get("lora_adapters", []), f"{where}.lora_adapters"),
        )
        if any(known.name == model.name for known in models):
            raise HostedModelsError(f"{where}.name: {model.name!r} is declared twice")
        models.append(model)
    return tuple(models)


def _name(value: object, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise HostedModelsError(f"{field}: required, a non-empty string")
    if len(value) > MAX_NAME or not NAME.match(value):
        raise HostedModelsError(
            f"{field}: must be 1..{MAX_NAME} characters of letters, digits and . _ : @ / + -, "
            "starting with a letter or digit"
        )
    return value


def _url(value: object, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise HostedModelsError(f"{field}: required, an http(s) URL such as http://vllm:8000/v1")
    if len(value) > MAX_URL or any(ord(c) < 33 or ord(c) == 127 for c in value):
        raise HostedModelsError(f"{field}: must be a URL of at most {MAX_URL} characters without spaces")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 (raises ValueError for a port that is not a number)
    except ValueError:
        raise HostedModelsError(f"{field}: not a valid URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HostedModelsError(f"{field}: must be an http:// or https:// URL with a host")
    if parts.username or parts.password:
        raise HostedModelsError(f"{field}: must not hold credentials; name the key in api_key_env")
    if parts.query or parts.fragment:
        raise HostedModelsError(f"{field}: must not have a query or fragment")
    return value.rstrip("/")


def _key_env(value: object, field: str, environ: Mapping[str, str]) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not ENV_NAME.match(value) or len(value) > MAX_NAME:
        raise HostedModelsError(f"{field}: must be an environment variable name (^[A-Z_][A-Z0-9_]*$)")
    if not environ.get(value):
        raise HostedModelsError(f"{field}: the environment variable {value} is not set (or empty)")
    return value


def _adapters(value: object, field: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise HostedModelsError(f"{field}: must be a list of adapter names")
    if len(value) > MAX_ADAPTERS:
        raise HostedModelsError(f"{field}: at most {MAX_ADAPTERS} adapters")
    names = tuple(_name(item, f"{field}[{i}]") for i, item in enumerate(value))
    if len(set(names)) != len(names):
        raise HostedModelsError(f"{field}: an adapter is listed twice")
    return names


def key_value(model: HostedModel, environ: Mapping[str, str] | None = None) -> str | None:
    """The model's key, read when a run is submitted (a rotated variable needs a restart anyway)."""
    if model.api_key_env is None:
        return None
    return (os.environ if environ is None else environ).get(model.api_key_env) or None
