"""The harness catalogue: Harbor's registered agents (harbor.md §4) and what each needs. The one list of
harness names: the gateway validates runs and shows harnesses from it, the executor reads key names here."""

from __future__ import annotations

# Where a harness reads its own key when a run names one (`harness_api_key_secret`); the executor sets
# these variables, and the catalogue shows them as the harness's keys.
HARNESS_KEY_NAMES: dict[str, tuple[str, ...]] = {
    "claude-code": ("ANTHROPIC_API_KEY",),
    "codex": ("OPENAI_API_KEY",),
    "openhands": ("LLM_API_KEY",),
    "mini-swe-agent": ("MSWEA_API_KEY",),
    "cursor-cli": ("CURSOR_API_KEY",),
}

HARNESSES: dict[str, dict[str, object]] = {
    "oracle": {"needs_model": False, "keys": [], "description": "Runs the task's reference solution"},
    "nop": {"needs_model": False, "keys": [], "description": "Does nothing; confirms tests fail untouched"},
    "terminus-2": {"needs_model": True, "keys": ["provider key (litellm)"], "runs_on": "executor host"},
}
for _name, _keys in HARNESS_KEY_NAMES.items():
    HARNESSES[_name] = {"needs_model": True, "keys": list(_keys), "network": "setup"}
for _name in [
    "acp",
    "copilot-cli",
    "code-puppy",
    "aider",
    "cline-cli",
    "cortex-code",
    "gemini-cli",
    "antigravity-cli",
    "antigravity-sdk",
    "rovodev-cli",
    "goose",
    "grok-build",
    "hermes",
    "junie",
    "kimi-code",
    "kimi-cli",
    "langgraph",
    "deerflow",
    "nemo-agent",
    "swe-agent",
    "opencode",
    "opencode-v2",
    "mimo",
    "mcode",
    "openclaw",
    "openhands-sdk",
    "pi",
    "qwen-coder",
    "devin",
    "trae-agent",
    "computer-1",
    "eve",
    "fx",
    "fx-dev",
    "dspy-rlm",
    "vibe",
    "muse-code",
    "strands",
    "fabric",
]:
    HARNESSES.setdefault(_name, {"needs_model": True, "keys": ["provider key"], "network": "setup"})

# Harnesses that run without a model (no model key, no model name handed to Harbor).
NO_MODEL = frozenset(name for name, info in HARNESSES.items() if not info["needs_model"])
