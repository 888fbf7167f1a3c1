"""Whether a harness that calls models through litellm can know a `provider` model's name: a name
litellm's bundled model map does not list fails a minute into the first attempt (after the sandbox
and the agent's install), so the submission says so at once, as a warning, not a refusal (a new
model can be newer than the map, and a provider may still serve it).

The map is the JSON file shipped inside the litellm package, read from disk: never fetched (the
gateway may have no internet, and a remote map would let a third party decide what a run is told),
not imported through litellm (seconds of imports), and loaded on the first submission that needs
it, so the gateway starts as fast as before.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import logging
from pathlib import Path

from regatta_shared.events import AgentSpec

log = logging.getLogger("regatta.gateway")

# Harnesses whose model calls go through litellm (a model name it cannot resolve fails the call).
LITELLM_HARNESSES = frozenset({"terminus-2", "aider", "mini-swe-agent", "swe-agent", "openhands"})
_MAP_FILE = "model_prices_and_context_window_backup.json"


@functools.cache
def known_models() -> frozenset[str] | None:
    """The model names litellm's bundled map lists; None when litellm or its map is not installed
    (then nothing is warned about: no answer is not a "no")."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / _MAP_FILE
    try:
        names = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        log.warning("litellm's model map %s cannot be read (%s): model names are not checked", path, error)
        return None
    return frozenset(name for name in names if name != "sample_spec")


def is_known(name: str, names: frozenset[str]) -> bool:
    # litellm resolves `provider/model` by the whole name or by the model after the provider.
    return name in names or ("/" in name and name.split("/", 1)[1] in names)


def model_warnings(agents: list[AgentSpec]) -> list[str]:
    """One warning per agent whose `provider` model its litellm harness cannot know."""
    warnings = []
    for agent in agents:
        model = agent.model
        if model.type != "provider" or not model.model or agent.harness not in LITELLM_HARNESSES:
            continue
        names = known_models()
        if names is None:
            return []
        if not is_known(model.model, names):
            warnings.append(
                f"agent {agent.index + 1}: model {model.model!r} is not in the model list of litellm, "
                f"which harness {agent.harness!r} calls models through; its attempts will likely fail "
                "unless the provider serves this name (check the spelling and the provider/ prefix)"
            )
    return warnings
