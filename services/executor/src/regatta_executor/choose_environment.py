"""`python -m regatta_executor.choose_environment`: the environment an executor started with this
process's environment would use, as JSON `{"kind", "reason"}`; exit 2 with the reason on stderr when
the name runs nothing. `regatta up` asks it once with its executors' environment (DOCKER_HOST included),
so every executor of the stack uses the same one."""

from __future__ import annotations

import json
import sys

from regatta_shared.settings import load_settings

from .environments.choice import EnvironmentNameError, resolve_environment


def main() -> None:
    settings = load_settings()
    try:
        resolved = resolve_environment(settings.executor_environment, settings.executor_environment_kwargs)
    except EnvironmentNameError as error:
        print(error, file=sys.stderr)
        raise SystemExit(2) from None
    print(json.dumps({"kind": resolved.choice.kind, "reason": resolved.reason}))


if __name__ == "__main__":
    main()
