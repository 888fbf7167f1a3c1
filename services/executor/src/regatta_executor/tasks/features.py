"""Harbor task features that one of Regatta's own environments (`container`, `local`) does not provide.

Each is refused before anything is created for the attempt, naming the task.toml field and the
reason, and pointing at an environment that has it: run anyway, a separate verifier would be graded
in the agent's sandbox under `local` (the isolation the task asked for, gone; `container` runs it in a
container of its own, as Harbor does) and a GPU task would fail in ways that look like the agent's.
Harbor's own environment types decide for themselves.
"""

from __future__ import annotations

from harbor.models.task.config import TaskConfig, VerifierConfig, VerifierEnvironmentMode
from harbor.models.task.verifier_mode import resolve_step_verifier_mode, resolve_task_verifier_mode

SEPARATE_ELSEWHERE = (
    "the container environment (REGATTA_EXECUTOR_ENVIRONMENT=container, a Docker engine) runs a verifier "
    "in its own container"
)


def _separate_field(section: str, verifier: VerifierConfig) -> str:
    if verifier.environment_mode == VerifierEnvironmentMode.SEPARATE:
        return f"{section} environment_mode = 'separate'"
    return f"{section} environment_mode ('separate', implied by its [verifier.environment])"


def separate_verifiers(config: TaskConfig) -> list[str]:
    """The task.toml sections whose verifier runs in its own container, as the message names them."""
    if not config.steps:
        if resolve_task_verifier_mode(config) == VerifierEnvironmentMode.SEPARATE:
            return [_separate_field("[verifier]", config.verifier)]
        return []
    found = []
    for step in config.steps:
        if resolve_step_verifier_mode(config, step) != VerifierEnvironmentMode.SEPARATE:
            continue
        if step.verifier.environment_mode is not None or step.verifier.environment is not None:
            found.append(_separate_field(f"[verifier] of step {step.name!r}", step.verifier))
        else:
            found.append(_separate_field("[verifier]", config.verifier))
    return list(dict.fromkeys(found))


def accelerators(config: TaskConfig) -> list[str]:
    """The GPU and TPU requests of the task's environments (its own and its verifiers')."""
    environments = [("[environment]", config.environment)]
    if config.verifier.environment is not None:
        environments.append(("[verifier.environment]", config.verifier.environment))
    for step in config.steps or ():
        if step.verifier.environment is not None:
            environments.append((f"[verifier.environment] of step {step.name!r}", step.verifier.environment))
    found = []
    for section, environment in environments:
        if environment.gpus:
            found.append(f"{section} gpus = {environment.gpus}")
        if environment.tpu is not None:
            found.append(f"{section} tpu")
    return found


def unsupported_features(config: TaskConfig, kind: str, *, runs_separate_verifier: bool) -> list[str]:
    """Why the `kind` environment (one of Regatta's own) cannot run the task, one reason per feature."""
    reasons = []
    separate = [] if runs_separate_verifier else separate_verifiers(config)
    if separate:
        reasons.append(
            f"task.toml {', '.join(separate)}: the verifier would run in a fresh container of its own, "
            f"which the {kind!r} environment does not make (it runs the verifier where the agent ran); "
            f"{SEPARATE_ELSEWHERE}"
        )
    asked = accelerators(config)
    if asked:
        reasons.append(
            f"task.toml {', '.join(asked)}: the {kind!r} environment of this executor allocates no GPUs "
            "or TPUs; run the task on an executor whose environment does (a GPU-capable Harbor "
            "environment type)"
        )
    return reasons
