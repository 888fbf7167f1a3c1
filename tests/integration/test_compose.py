"""compose.yaml is validated statically (no Docker engine here) and stays scalable."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

from tests.conftest import ROOT, unavailable

SERVICES = {"nats", "postgres", "relay", "registry-sync", "run-scheduler", "scoring", "executor", "gateway"}


def test_compose_file_is_valid_and_executors_scale() -> None:
    if shutil.which("docker-compose") is None:
        unavailable("docker-compose (Debian package) is not installed")
    result = subprocess.run(
        ["docker-compose", "-f", "compose.yaml", "config"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    config = yaml.safe_load(result.stdout)
    assert set(config["services"]) == SERVICES
    executor = config["services"]["executor"]
    # --scale executor=N needs no fixed name and no host port.
    assert "container_name" not in executor and "ports" not in executor
    for name in SERVICES - {"nats", "postgres"}:
        dockerfile = config["services"][name]["build"]["dockerfile"]
        assert (ROOT / dockerfile).is_file(), dockerfile
        assert Path(dockerfile).name == "Dockerfile"
