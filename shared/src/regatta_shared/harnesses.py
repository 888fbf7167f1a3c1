"""The harness catalogue: Harbor's registered agents (harbor.md §4) and what each needs."""

from __future__ import annotations

NO_MODEL = {"oracle", "nop"}

HARNESSES: dict[str, dict[str, object]] = {
    "oracle": {"needs_model": False, "keys": [], "description": "Runs the task's reference solution"},
    "nop": {"needs_model": False, "keys": [], "description": "Does nothing; confirms tests fail untouched"},
    "terminus-2": {"needs_model": True, "keys": ["provider key (litellm)"], "runs_on": "executor host"},
    "claude-code": {"needs_model": True, "keys": ["ANTHROPIC_API_KEY"], "network": "setup"},
    "codex": {"needs_model": True, "keys": ["OPENAI_API_KEY"], "network": "setup"},
    "openhands": {"needs_model": True, "keys": ["LLM_API_KEY"], "network": "setup"},
    "mini-swe-agent": {"needs_model": True, "keys": ["MSWEA_API_KEY"], "network": "setup"},
    "cursor-cli": {"needs_model": True, "keys": ["CURSOR_API_KEY"], "network": "setup"},
}
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
