"""What a task's `${VAR}` may read: nothing of the executor's own environment.

Harbor fills `${VAR}` and `${VAR:-default}` in a task's env tables (`[environment].env`,
`[verifier].env`, `[solution].env`, a step's `[verifier].env`, a verifier environment's `env`) from
its host's environment (harbor.utils.env.resolve_env_vars), and `${VAR}` in MCP server headers from the
agent's env, then the host's. The executor's environment holds the platform's secrets
(REGATTA_MASTER_KEY, the NATS URL and its password), and a task is written by whoever publishes the
benchmark, so Regatta offers a task none of it (OFFERED is empty):
- Harbor's resolution reads OFFERED instead of `os.environ` (`scrub_harbor_environment`), so a
  `${VAR:-default}` gets its default and a `${VAR}` Harbor's "not found" error, in every environment
  type, the compose interpolation of `container` included (it resolves the task's env the same way);
- `check_task_variables` refuses, before anything is made for the attempt, each `${VAR}` that nothing
  fills, naming the task.toml field and the variable: the same on every try and every executor.
The run's own values reach a task only through the job, as before: the agent's env (which MCP headers
are filled from) and the verifier's secrets (which replace a `[verifier].env` entry of the same name).
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Iterator, Mapping
from types import MappingProxyType
from typing import Any

import harbor.utils.env as harbor_env
from harbor.models.agent.name import AgentName
from harbor.models.task.config import TaskConfig

from .errors import TaskEnvironmentError

# The executor's environment variables a task's `${VAR}` may read. Harbor documents no variable its
# trials need there (its compose infrastructure variables are set by the environment, not read from
# the host), so none.
OFFERED: Mapping[str, str] = MappingProxyType({})
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_LABEL = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
MAX_REASONS = 5


class _OsWithoutHostEnvironment:
    """`os` as harbor.utils.env sees it: the real module but for its environment."""

    environ = OFFERED

    @staticmethod
    def getenv(key: str, default: str | None = None) -> str | None:
        return OFFERED.get(key, default)

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)


_SCRUBBED = _OsWithoutHostEnvironment()


def scrub_harbor_environment() -> None:
    """Idempotent: Harbor's `${VAR}` resolution reads OFFERED from now on, in this whole process. It
    fails loudly, rather than leak, if Harbor stopped reading the environment through its module's
    `os` (an upgrade that imports `environ` by name)."""
    code = harbor_env.resolve_env_vars.__code__
    if not {"os", "environ"} <= set(code.co_names) or "os" in code.co_varnames:
        raise RuntimeError(
            "harbor.utils.env.resolve_env_vars no longer reads os.environ through its module's `os`; "
            "regatta_executor.tasks.variables must follow it before tasks may run"
        )
    harbor_env.os = _SCRUBBED  # type: ignore[attr-defined]


def resolve_task_env(env: dict[str, str]) -> dict[str, str]:
    """A task's env table as Harbor's trial will resolve it (ValueError for a `${VAR}` nothing fills)."""
    scrub_harbor_environment()
    return harbor_env.resolve_env_vars(env)


def _shown(name: str, pattern: re.Pattern[str] = _NAME) -> str:
    # The task's own text, repeated in a report: only names that look like names.
    return name if pattern.match(name) else "(an unusual name)"


def _env_tables(config: TaskConfig, oracle: bool) -> Iterator[tuple[str, dict[str, str], bool]]:
    """(field as task.toml spells it, the table, whether the run's verifier secrets replace its entries)."""
    yield "[environment].env", config.environment.env, False
    yield "[verifier].env", config.verifier.env, True
    if config.verifier.environment is not None:
        yield "[verifier.environment].env", config.verifier.environment.env, False
    if oracle:
        yield "[solution].env", config.solution.env, False
    for step in config.steps or ():
        yield f"[verifier] of step {step.name!r} env", step.verifier.env, True
        if step.verifier.environment is not None:
            yield f"[verifier.environment] of step {step.name!r} env", step.verifier.environment.env, False


def unfilled_variables(
    config: TaskConfig, *, agent_env: Collection[str], verifier_env: Collection[str], oracle: bool
) -> list[str]:
    """Why each `${VAR}` of the task that nothing offered fills is refused, one reason each."""
    reasons = []
    for field, table, replaced_by_run in _env_tables(config, oracle):
        for key, value in table.items():
            if replaced_by_run and key in verifier_env:
                continue  # Harbor puts the run's verifier secret of that name over the task's entry
            for variable, default in harbor_env.get_required_host_vars({key: value}):
                if default is not None or variable in OFFERED:
                    continue
                secret = f", or have the run give its verifier a secret named {_shown(key)}"
                reasons.append(
                    f"task.toml {field} {_shown(key)} = '${{{_shown(variable)}}}': a task's ${{VAR}} is "
                    f"filled from nothing of the executor's environment, and {_shown(variable)} has no "
                    f"default; write the value in the table or a default ('${{{_shown(variable)}:-…}}')"
                    + (secret if replaced_by_run else "")
                )
    for server in config.environment.mcp_servers:
        for header, value in server.headers.items():
            for variable, _default in harbor_env.embedded_env_var_templates(value):
                if variable in agent_env or variable in OFFERED:
                    continue
                # With a default too: Harbor would look in the executor's environment before using it.
                reasons.append(
                    f"task.toml [environment].mcp_servers {_shown(server.name, _LABEL)!r} header {header!r}: "
                    f"${{{_shown(variable)}}} is filled only from the run's env and secrets (never the "
                    f"executor's environment), and the run gives the agent none named {_shown(variable)}"
                )
    return reasons


def check_task_variables(config: TaskConfig, trial_config: dict[str, Any]) -> None:
    """TaskEnvironmentError naming every `${VAR}` of the task that the trial would fill from nothing."""
    reasons = unfilled_variables(
        config,
        agent_env=(trial_config.get("agent") or {}).get("env") or {},
        verifier_env=(trial_config.get("verifier") or {}).get("env") or {},
        oracle=(trial_config.get("agent") or {}).get("name") == AgentName.ORACLE.value,
    )
    if len(reasons) > MAX_REASONS:
        reasons = [*reasons[:MAX_REASONS], f"and {len(reasons) - MAX_REASONS} more"]
    if reasons:
        raise TaskEnvironmentError("; ".join(reasons))
