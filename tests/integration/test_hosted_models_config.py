"""Issue 19, item 3: a gateway given an unusable REGATTA_HOSTED_MODELS does not start, and says which
field is wrong (a real gateway process, before it touches the database or NATS)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize(
    ("declared", "named"),
    [
        ([{"name": "Qwen/Qwen3-8B", "base_url": "vllm:8000"}], "REGATTA_HOSTED_MODELS[0].base_url"),
        (
            [{"name": "Qwen/Qwen3-8B", "base_url": "http://vllm:8000/v1", "api_key_env": "UNSET_HOSTED_KEY"}],
            "REGATTA_HOSTED_MODELS[0].api_key_env: the environment variable UNSET_HOSTED_KEY is not set",
        ),
    ],
)
def test_the_gateway_refuses_to_start_with_a_bad_declaration_naming_the_field(
    tmp_path: Path, declared: list[dict[str, str]], named: str
) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if k != "UNSET_HOSTED_KEY"},
        "REGATTA_HOSTED_MODELS": json.dumps(declared),
        "REGATTA_DATA_DIR": str(tmp_path),
        "NATS_URL": "nats://127.0.0.1:1",  # never reached: the declaration is checked first
    }
    done = subprocess.run(
        [sys.executable, "-m", "regatta_gateway"], env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode != 0
    assert f"regatta gateway: invalid configuration: {named}" in done.stderr, done.stderr[-2000:]
    assert not list(tmp_path.iterdir()), "nothing was created"
