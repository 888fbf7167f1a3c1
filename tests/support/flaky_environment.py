"""A real `local` sandbox whose start fails the first N times per task: an injected infrastructure fault.

The executor selects it like any Harbor environment (`REGATTA_EXECUTOR_ENVIRONMENT=module:Class`); the
failure is Harbor's own SandboxBuildFailedError, which its error policy marks retryable and unscored.
"""

from __future__ import annotations

from pathlib import Path

from harbor.environments.base import SandboxBuildFailedError
from regatta_executor.local.environment import LocalEnvironment, LocalEnvironmentOptions


class FlakyOptions(LocalEnvironmentOptions):
    failures: int = 1
    counter_dir: str = "/tmp"


class FlakyLocalEnvironment(LocalEnvironment):
    options_model = FlakyOptions
    options: FlakyOptions

    async def start(self, force_build: bool) -> None:
        counter = Path(self.options.counter_dir) / f"{self.environment_name}.starts"
        starts = int(counter.read_text()) if counter.exists() else 0
        counter.write_text(str(starts + 1))
        if starts < self.options.failures:
            raise SandboxBuildFailedError(f"injected infrastructure fault #{starts + 1}")
        await super().start(force_build)
