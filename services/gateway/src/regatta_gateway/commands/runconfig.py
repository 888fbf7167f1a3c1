"""The run-config schema: the Osmosis TOML (osmosis-cli-contract.md §6) and its JSON body (§4.4).

Unknown keys are rejected everywhere; every error names its dotted field.
"""

from __future__ import annotations

import re
import tomllib
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator
from pydantic_core import PydanticCustomError
from regatta_shared.events.integrity import VERIFIER_INTEGRITY_POLICIES, VerifierIntegrity
from regatta_shared.rules import execution_defaults as defaults

from regatta_gateway.secrets.names import SECRET_NAME

ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
# Every value is bounded: the whole submission becomes one event, which the bus must carry.
MAX_TEXT = 2000
NonBlank = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_TEXT)]
Text = Annotated[str, StringConstraints(max_length=MAX_TEXT)]
EnvValue = Annotated[str, StringConstraints(max_length=32 * 1024)]
MAX_ENV = 128
MAX_SELECTED = 10_000
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
MAX_RUN_NAME = 200
MAX_AGENTS = 8
MAX_SECRET_VALUE = 64 * 1024  # as for stored secrets


class ConfigError(Exception):
    def __init__(self, issues: list[dict[str, str]]) -> None:
        super().__init__("; ".join(f"{i['key']}: {i['message']}" for i in issues))
        self.issues = issues


class Strict(BaseModel):
    # NaN and Infinity (JSON's extension, TOML's nan/inf) mean nothing in a run config and poison every
    # timeout, sum and score downstream: refused here, naming the field, whatever the body's format.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


def _secret(value: str | None) -> str | None:
    if value is not None and not SECRET_NAME.match(value):
        raise ValueError("must match ^[A-Z][A-Z0-9_]*$")
    return value


def _env(values: dict[str, str]) -> dict[str, str]:
    for key in values:
        if not ENV_NAME.match(key) or key.startswith("_OSMOSIS_"):
            raise ValueError(f"env key {key!r} must match ^[A-Z_][A-Z0-9_]*$ and not start with _OSMOSIS_")
    return values


class ProviderModel(Strict):
    type: Literal["provider"]
    model: NonBlank
    api_key_secret: NonBlank
    _check = field_validator("api_key_secret")(_secret)


class EndpointModel(Strict):
    type: Literal["endpoint"]
    base_url: NonBlank
    model: NonBlank
    api_key_secret: NonBlank
    extra_headers: dict[Text, Text] = Field(default_factory=dict, max_length=32)
    _check = field_validator("api_key_secret")(_secret)

    @field_validator("extra_headers")
    @classmethod
    def _no_authorization(cls, headers: dict[str, str]) -> dict[str, str]:
        if any(k.lower() == "authorization" for k in headers):
            raise ValueError("must not set Authorization")
        return headers


class HostedModel(Strict):
    type: Literal["hosted"]
    base_model: NonBlank
    lora_model_name: Text = ""


class AgentEntry(Strict):
    harness: NonBlank | None = None
    harness_api_key_secret: Text | None = None
    model: Annotated[ProviderModel | EndpointModel | HostedModel, Field(discriminator="type")]
    env: dict[Text, EnvValue] = Field(default_factory=dict, max_length=MAX_ENV)
    _check = field_validator("harness_api_key_secret")(_secret)
    _check_env = field_validator("env")(_env)


class Experiment(Strict):
    benchmark: NonBlank


class TasksConfig(Strict):
    task_set: NonBlank | None = None
    task_names: list[NonBlank] = Field(default_factory=list, max_length=MAX_SELECTED)
    categories: list[NonBlank] = Field(default_factory=list, max_length=MAX_SELECTED)


class ExecutionConfig(Strict):
    attempts_per_task: int = Field(defaults.ATTEMPTS_PER_TASK, ge=1, le=100)
    max_concurrent_attempts: int = Field(defaults.MAX_CONCURRENT_ATTEMPTS, ge=1, le=10_000)
    timeout_multiplier: float = Field(defaults.TIMEOUT_MULTIPLIER, gt=0, le=100)
    max_retries: int = Field(defaults.MAX_RETRIES, ge=0, le=10)
    pass_threshold: float | None = Field(None, ge=0, le=1)
    judge_model: NonBlank | None = None
    judge_api_key_secret: Text | None = None
    verifier_secrets: list[Text] = Field(default_factory=list, max_length=16)
    cost_cap_usd: float | None = Field(None, gt=0, le=1_000_000_000)
    # None: the benchmark's standard policy (run_resolution.execution_settings).
    verifier_integrity: VerifierIntegrity | None = None
    _check = field_validator("judge_api_key_secret")(_secret)

    @field_validator("verifier_integrity", mode="before")
    @classmethod
    def _policy(cls, value: Any) -> Any:
        if value is not None and value not in VERIFIER_INTEGRITY_POLICIES:
            allowed = " or ".join(f'"{p}"' for p in VERIFIER_INTEGRITY_POLICIES)
            # A message of its own (no "Value error," prefix): it is the whole of what the user reads.
            raise PydanticCustomError(
                "verifier_integrity",
                "execution.verifier_integrity must be {allowed} (got {got})",
                {"allowed": allowed, "got": repr(str(value)[:40])},
            )
        return value

    @field_validator("verifier_secrets")
    @classmethod
    def _names(cls, names: list[str]) -> list[str]:
        for name in names:
            _secret(name)
        return names

    @field_validator("attempts_per_task", "max_concurrent_attempts", "max_retries", mode="before")
    @classmethod
    def _strict_int(cls, value: Any) -> Any:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError("must be an integer")
        return value


class SecretsBlock(Strict):
    required: list[Text] = Field(default_factory=list, max_length=16)
    provided: dict[Text, str] = Field(default_factory=dict, max_length=16)

    @field_validator("required")
    @classmethod
    def _required_names(cls, names: list[str]) -> list[str]:
        for name in names:
            _secret(name)
        return names

    @field_validator("provided")
    @classmethod
    def _provided(cls, values: dict[str, str]) -> dict[str, str]:
        # Messages name the secret, never echo its value.
        for name, value in values.items():
            if not SECRET_NAME.match(name):
                raise ValueError(f"secret name {name[:80]!r} must match ^[A-Z][A-Z0-9_]*$")
            if not value or len(value) > MAX_SECRET_VALUE:
                raise ValueError(f"{name}: value must be 1..{MAX_SECRET_VALUE} characters")
        return values


def _run_name(value: str | None) -> str | None:
    """Run names become URL segments and, in clients, file names: nothing that walks a path."""
    if value is None:
        return None
    if not 1 <= len(value) <= MAX_RUN_NAME or value != value.strip():
        raise ValueError(f"must be 1..{MAX_RUN_NAME} characters without surrounding spaces")
    if CONTROL.search(value) or "\\" in value:
        raise ValueError("must not contain control characters or backslashes")
    if value.startswith("/") or any(part in (".", "..") for part in value.split("/")):
        raise ValueError("must not start with '/' or contain '.' or '..' segments")
    return value


class RunRequest(Strict):
    """The JSON body of a submission (contract §4.4); the TOML maps onto it one to one."""

    experiment_config: Experiment
    agents: list[AgentEntry] = Field(min_length=1, max_length=MAX_AGENTS)
    tasks_config: TasksConfig | None = None
    execution_config: ExecutionConfig | None = None
    env_config: dict[Text, EnvValue] = Field(default_factory=dict, max_length=MAX_ENV)
    secrets: SecretsBlock | None = None
    name: str | None = None
    _check_env = field_validator("env_config")(_env)
    _check_name = field_validator("name")(_run_name)

    def referenced_secrets(self) -> list[str]:
        """Names to resolve from the store: agents' keys, judge key, verifier names, unprovided required."""
        names: list[str] = []
        for agent in self.agents:
            key = getattr(agent.model, "api_key_secret", None)
            names += [n for n in (key, agent.harness_api_key_secret) if n]
        execution = self.execution_config
        if execution:
            names += [n for n in (execution.judge_api_key_secret,) if n] + list(execution.verifier_secrets)
        if self.secrets:
            names += [n for n in self.secrets.required if n not in self.secrets.provided]
        return list(dict.fromkeys(names))


def _issues(error: ValidationError) -> list[dict[str, str]]:
    issues = []
    for item in error.errors():
        key = ".".join(str(p) for p in item["loc"] if not str(p).startswith("function-"))
        message = "Unrecognized key" if item["type"] == "extra_forbidden" else item["msg"]
        issues.append({"key": key or "(root)", "message": message})
    return issues


def parse_request[M: BaseModel](body: dict[str, Any], model: type[M] = RunRequest) -> M:
    """The body as `model`: a submission (RunRequest) unless told, or the parts of one a preview reads."""
    try:
        return model.model_validate(body)
    except ValidationError as error:
        raise ConfigError(_issues(error)) from None


TOML_TABLES = {"experiment", "tasks", "agents", "execution", "verifier", "secrets", "env", "name"}


def toml_to_request(text: str) -> dict[str, Any]:
    """Map the Osmosis TOML onto the submission body exactly as the CLI does (contract §6)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError([{"key": "(toml)", "message": f"malformed TOML: {error}"}]) from None
    unknown = sorted(set(doc) - TOML_TABLES)
    if unknown:
        raise ConfigError([{"key": key, "message": "Unrecognized key"} for key in unknown])
    if "experiment" not in doc:
        raise ConfigError([{"key": "experiment", "message": "Field required"}])
    body: dict[str, Any] = {"experiment_config": doc["experiment"], "agents": doc.get("agents", [])}
    if doc.get("name") is not None:
        body["name"] = doc["name"]
    if doc.get("tasks"):
        body["tasks_config"] = doc["tasks"]
    execution = dict(doc.get("execution") or {})
    verifier = doc.get("verifier") or {}
    if not isinstance(verifier, dict) or set(verifier) - {"required"}:
        raise ConfigError(
            [{"key": f"verifier.{k}", "message": "Unrecognized key"} for k in set(verifier) - {"required"}]
        )
    if verifier.get("required"):
        execution["verifier_secrets"] = verifier["required"]
    if execution:
        body["execution_config"] = execution
    if doc.get("env"):
        body["env_config"] = doc["env"]
    secrets = doc.get("secrets") or {}
    if not isinstance(secrets, dict) or set(secrets) - {"required"}:
        raise ConfigError(
            [{"key": f"secrets.{k}", "message": "Unrecognized key"} for k in set(secrets) - {"required"}]
        )
    if secrets.get("required"):
        body["secrets"] = {"required": secrets["required"], "provided": {}}
    return body
