"""The services are listed once (regatta.services): compose.yaml runs the same ones, each image runs its
service's module, and the embedded NATS server has a user for each."""

from __future__ import annotations

import re

import yaml

from regatta import nats_server
from regatta.services import NAMES, SERVICES
from tests.conftest import ROOT

INFRASTRUCTURE = {"nats", "postgres"}


def _compose_services() -> dict[str, dict]:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]


def test_compose_runs_the_listed_services_and_nothing_else() -> None:
    assert set(_compose_services()) - INFRASTRUCTURE == set(NAMES)


def test_each_services_image_runs_its_module_and_its_health_check() -> None:
    compose = _compose_services()
    for service in SERVICES:
        dockerfile = (ROOT / compose[service.name]["build"]["dockerfile"]).read_text()
        assert f'CMD ["python", "-m", "{service.module}"]' in dockerfile, service.name
        checks_health_port = bool(re.search(r"HEALTHCHECK .*REGATTA_HEALTH_PORT", dockerfile))
        assert checks_health_port is service.health_port, service.name


def test_every_service_has_its_own_nats_user() -> None:
    assert {nats_server.user_for(name) for name in NAMES} | {"admin"} == set(nats_server.USERS)
    assert len(nats_server.USERS) == len(set(nats_server.USERS))


def test_each_services_module_runs_the_main_of_its_entry() -> None:
    """`python -m <module>` and the stack's launcher (regatta.zygote) start a service the same way."""
    for service in SERVICES:
        package = ROOT / "services" / service.name / "src" / service.module
        main = (package / "__main__.py").read_text()
        relative = service.main_module.removeprefix(service.module)
        assert f"from {relative} import main" in main or f"from {service.main_module} import main" in main
        assert main.rstrip().endswith("main()"), service.name
