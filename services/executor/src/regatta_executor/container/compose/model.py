"""A compose project as the container environment runs it: its services (build or image, environment,
command, entrypoint, dependencies, healthcheck, volumes, user) and named volumes, and the bounds and
supported keys every file of it is checked against (project.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from harbor.constants import MAIN_SERVICE_NAME

TASK_FILE = "docker-compose.yaml"
TASK_LABEL = f"environment/{TASK_FILE}"
DOTENV = ".env"
MAX_DOTENV_BYTES = 64 * 1024
MAX_SERVICES = 10
MAX_VOLUMES = 16
MAX_STRING = 64 * 1024
MAX_PATH = 4096
# Harbor's keep-alive command for `main` (its base files), which Regatta's pid 1 passes to main's
# entrypoint (pid1.py): another command for main is refused, an entrypoint is main's own.
HARBOR_MAIN_COMMAND = ["sh", "-c", "sleep infinity"]
CONDITIONS = ("service_started", "service_healthy", "service_completed_successfully")
PULL_POLICIES = ("always", "never", "missing", "if_not_present", "build")
SERVICE_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
VOLUME_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,254}$")
USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,31})?$")
DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}
TOP_LEVEL = {"services", "volumes", "networks", "version", "name"}
SERVICE_KEYS = {
    "build", "image", "environment", "command", "entrypoint", "depends_on", "healthcheck", "volumes",
    "working_dir", "user", "networks", "pull_policy", "init", "restart", "expose", "ports",
}  # fmt: skip
# Keys accepted and deliberately without effect, with the reason the attempt's log gives.
IGNORED = {
    "restart": "containers are not restarted (a service that stops stays stopped)",
    "expose": "every service's ports are open to the others on the attempt's network",
    "ports": "nothing is published on the host; services reach each other by name",
}


@dataclass(frozen=True)
class Build:
    context: Path
    dockerfile: str
    args: dict[str, str]


@dataclass(frozen=True)
class VolumeMount:
    source: str | None
    """A top-level volume's name, or None for an anonymous volume of this attempt."""
    target: str
    read_only: bool


@dataclass(frozen=True)
class Healthcheck:
    test: list[str]
    interval_ns: int | None = None
    timeout_ns: int | None = None
    retries: int | None = None
    start_period_ns: int | None = None


@dataclass(frozen=True)
class Service:
    name: str
    build: Build | None
    image: str | None
    environment: dict[str, str]
    command: list[str] | None
    entrypoint: list[str] | None
    depends_on: dict[str, str]
    healthcheck: Healthcheck | None
    """None: the image's own HEALTHCHECK (if any); test ["NONE"] disables it."""
    volumes: list[VolumeMount]
    working_dir: str | None
    user: str | None
    init: bool | None
    pull_policy: str | None = None

    @property
    def builds(self) -> bool:
        """Whether the service's image is built (as Compose decides: a build and no image, or a build
        whose pull_policy is `build`), else pulled by name."""
        return self.build is not None and (self.image is None or self.pull_policy == "build")


@dataclass(frozen=True)
class ComposeProject:
    services: dict[str, Service]
    volumes: list[str]
    notes: list[str] = field(default_factory=list)
    """Keys accepted without effect, for the attempt's log."""

    @property
    def main(self) -> Service:
        return self.services[MAIN_SERVICE_NAME]

    @property
    def sidecars(self) -> list[Service]:
        """Every service but main, each after the services it depends on."""
        ordered: list[Service] = []
        placed: set[str] = set()
        while len(placed) < len(self.services) - 1:
            for name, service in sorted(self.services.items()):
                if name == MAIN_SERVICE_NAME or name in placed:
                    continue
                if set(service.depends_on) <= placed:
                    ordered.append(service)
                    placed.add(name)
        return ordered
