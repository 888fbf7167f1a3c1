"""compose.yaml is validated statically (docker-compose 1.29 `config`): scalable, nothing privileged."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from regatta_shared.settings import Settings

from regatta.services import NAMES
from tests.conftest import ROOT, unavailable

SERVICES = {"nats", "postgres", *NAMES}  # the platform's services (regatta.services) and what they use


SECRETS = {"REGATTA_BOOTSTRAP_TOKEN": "a" * 40, "REGATTA_MASTER_KEY": "b" * 40}
# The per-service NATS passwords compose also requires (docs/deployment.md); given in every case here.
NATS_USERS = ("ADMIN", "RELAY", "REGISTRY_SYNC", "RUN_SCHEDULER", "SCORING", "GATEWAY", "EXECUTOR")
NATS_PASSWORDS = {
    f"REGATTA_NATS_{user}_PASSWORD": f"{index:02d}" * 12 for index, user in enumerate(NATS_USERS)
}


def _config(**env: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("docker-compose") is None:
        unavailable("docker-compose (Debian package) is not installed")
    clean = {k: v for k, v in os.environ.items() if k not in SECRETS and k not in NATS_PASSWORDS}
    return subprocess.run(
        ["docker-compose", "-f", "compose.yaml", "config"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean, **NATS_PASSWORDS, **env},
    )


def test_compose_refuses_to_start_without_the_token_or_the_master_key() -> None:
    """Issue 16, finding 6: no guessable default; the services also refuse placeholders (change-me)."""
    for missing in SECRETS:
        result = _config(**{k: v for k, v in SECRETS.items() if k != missing})
        assert result.returncode != 0
        assert f"set {missing} to a long random" in result.stderr, result.stderr
    config = yaml.safe_load(_config(**SECRETS).stdout)
    assert "change-me" not in str(config)


def test_compose_file_is_valid_and_executors_scale() -> None:
    result = _config(**SECRETS)
    assert result.returncode == 0, result.stderr
    config = yaml.safe_load(result.stdout)
    assert set(config["services"]) == SERVICES
    executor = config["services"]["executor"]
    # --scale executor=N needs no fixed name and no host port.
    assert "container_name" not in executor and "ports" not in executor
    for name, service in config["services"].items():
        assert not service.get("privileged"), f"{name} is privileged"
        assert "SYS_ADMIN" not in (service.get("cap_add") or []), name
    # Executors run each attempt in its own container on the engine, through its socket: the only
    # service that holds it, and only the engine's socket (no task or log folder of the host).
    assert executor["environment"]["REGATTA_EXECUTOR_ENVIRONMENT"] == "container"
    # The services that check a task's ceilings know its storage is the containers' disk, not RAM.
    for name in ("registry-sync", "gateway"):
        assert config["services"][name]["environment"]["REGATTA_EXECUTOR_ENVIRONMENT"] == "container", name
    assert executor["environment"]["DOCKER_HOST"] == "unix:///var/run/docker.sock"
    assert [v.rsplit(":", 1)[0] for v in executor["volumes"]] == ["/var/run/docker.sock:/var/run/docker.sock"]
    assert "no-new-privileges:true" in executor["security_opt"]
    socket_holders = {
        name
        for name, service in config["services"].items()
        if any("docker.sock" in str(volume) for volume in service.get("volumes") or [])
    }
    assert socket_holders == {"executor"}
    for name in SERVICES - {"nats", "postgres"}:
        dockerfile = config["services"][name]["build"]["dockerfile"]
        assert (ROOT / dockerfile).is_file(), dockerfile
        assert Path(dockerfile).name == "Dockerfile"


def test_the_gateway_gets_the_default_registry_of_its_settings_unless_the_operator_names_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Compose passes REGATTA_DEFAULT_REGISTRY to the gateway: the settings' default when unset, the
    operator's value (from .env) when set, and empty (no default registry) when set empty."""
    monkeypatch.delenv("REGATTA_DEFAULT_REGISTRY", raising=False)

    def gateway_registry(**env: str) -> object:
        result = _config(**SECRETS, **env)
        assert result.returncode == 0, result.stderr
        return yaml.safe_load(result.stdout)["services"]["gateway"]["environment"]["REGATTA_DEFAULT_REGISTRY"]

    assert gateway_registry() == Settings.model_fields["default_registry"].default
    assert gateway_registry(REGATTA_DEFAULT_REGISTRY="/srv/registry.json") == "/srv/registry.json"
    assert gateway_registry(REGATTA_DEFAULT_REGISTRY="") in ("", None)
