"""A compose task's services on the Docker engine API: one network and the named volumes per attempt,
the sidecars started in `depends_on` order (waiting, with a deadline, for `service_healthy` and
`service_completed_successfully`), and all of it removed when the attempt ends.

The attempt's network is a user-defined bridge on which every service is reachable by its name (an
alias), as on Compose's default network. It gets an explicit bridge name so that the rules of
network.py can be applied to it: traffic from the bridge to the host (INPUT) and to private, link-local
and shared ranges (DOCKER-USER) is dropped, and traffic between the bridge's own containers is accepted
before those drops (the services' addresses are private too). A `no-network` task's network is
`internal` (no route out; the same rules keep the bridge's gateway address, the host, out of reach):
the services talk to each other and nothing leaves. Harbor's docker environment instead gives `main`
no network at all, so its sidecars are unreachable from it.

Every container gets the labels, limits, log configuration and hardening of the agent's own container
(config.py's `container_config`), with the service's image, command, user and environment instead of
Regatta's pid 1: a sidecar runs the program its image or compose file names. Networks and volumes carry
the same ownership labels as containers, so `sweep` removes those a killed executor left.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
from docker.errors import APIError, NotFound
from docker.types import Healthcheck, Mount

from regatta_executor.container import janitor
from regatta_executor.container.compose.model import ComposeProject, Service, VolumeMount
from regatta_executor.container.config import create_container
from regatta_executor.container.engine import LABEL_HOST, LABEL_MANAGED, LABEL_OWNER, LABEL_OWNERS, host_name
from regatta_executor.container.image.resolved import ResolvedImage
from regatta_executor.container.network import bridge as network
from regatta_executor.container.network import dns
from regatta_executor.container.network.bridge import NetworkIsolationError, Rule

logger = logging.getLogger(__name__)
BRIDGE_PREFIX = "rgc"
OPTION_BRIDGE = "com.docker.network.bridge.name"
# The longest a dependency may take to become healthy or to finish, whatever its healthcheck says.
MAX_WAIT_SEC = 600.0
_POLL_SEC = 0.5
# What the agent's container configuration sets for Regatta's pid 1; a sidecar gets its own instead.
PID1_KEYS = ("entrypoint", "command", "init", "user")


class ComposeStartError(RuntimeError):
    """A service of the task's compose file did not start, become healthy or finish as asked."""


def bridge_name(network: str) -> str:
    """A host interface name for the attempt's network (at most 15 characters, never an option)."""
    return BRIDGE_PREFIX + hashlib.sha256(network.encode()).hexdigest()[:12]


def attempt_rules(bridge: str, gateway: ipaddress.IPv4Address) -> list[Rule]:
    """The sandbox bridge's rules (network.py: its DNS to the bridge's forwarder, nothing else to the
    host, nothing forwarded to private ranges) for `bridge`, and, first, acceptance of the traffic
    between the bridge's own containers (which the drop of private ranges would otherwise stop)."""
    own: Rule = ("filter", "DOCKER-USER", ["-i", bridge, "-o", bridge, "-j", "ACCEPT"])
    return [own, *network.rules(bridge, gateway)]


@dataclass
class ComposeRun:
    """The engine objects of one attempt's compose project, made by `create_network`, `create_volumes`
    and `start_sidecars`, removed by `remove`."""

    client: docker.DockerClient
    project: ComposeProject
    prefix: str
    """The attempt's container name: every object's name starts with it."""
    labels: dict[str, str]
    log: logging.Logger = logger
    network: str = ""
    bridge: str = ""
    containers: dict[str, str] = field(default_factory=dict)
    volumes: dict[str, str] = field(default_factory=dict)
    """Top-level volume name (or `<service>@<target>` for an anonymous one) to its engine name."""
    gateway: ipaddress.IPv4Address | None = None
    _rules: bool = False

    def create_network(self, *, public: bool, dns_upstreams: Sequence[str] = ()) -> str:
        """The attempt's network with the sandbox's rules; a public one gets the sandbox's DNS
        forwarder on its gateway too (an internal one resolves only the services' names)."""
        self.network = f"{self.prefix}-net"
        self.bridge = bridge_name(self.network)
        try:
            with dns.bridge_lock(self.bridge):
                self.client.networks.create(
                    self.network,
                    driver="bridge",
                    internal=not public,
                    labels=self.labels,
                    options={
                        OPTION_BRIDGE: self.bridge,
                        "com.docker.network.bridge.enable_icc": "true",
                        "com.docker.network.bridge.enable_ip_masquerade": "true" if public else "false",
                    },
                )
                self.gateway = network.gateway_address(self.client, self.network)
                self._rules = True
                if public:
                    upstreams = dns.parse_upstreams(list(dns_upstreams)) or dns.host_upstreams()
                    dns.ensure_forwarder(self.bridge, self.gateway, upstreams)
                network._install_rules(attempt_rules(self.bridge, self.gateway))
        except dns.ForwarderError as exc:
            raise NetworkIsolationError(str(exc)) from exc
        return self.network

    def create_volumes(self) -> None:
        for name in self.project.volumes:
            self.volumes[name] = self._volume(name)
        for service in self.project.services.values():
            for mount in service.volumes:
                if mount.source is None:
                    key = f"{service.name}@{mount.target}"
                    self.volumes[key] = self._volume(f"anon{len(self.volumes)}")

    def _volume(self, name: str) -> str:
        engine_name = f"{self.prefix}_{name}"
        self.client.volumes.create(engine_name, driver="local", labels=self.labels)
        return engine_name

    def mounts(self, service: Service) -> list[Mount]:
        return [
            Mount(mount.target, self._volume_of(service, mount), type="volume", read_only=mount.read_only)
            for mount in service.volumes
        ]

    def _volume_of(self, service: Service, mount: VolumeMount) -> str:
        return self.volumes[mount.source if mount.source is not None else f"{service.name}@{mount.target}"]

    def attach(self, config: dict[str, Any], service: Service) -> None:
        """Put the container of `config` on the attempt's network under the service's name."""
        config.pop("network_mode", None)
        config["network"] = self.network
        config["networking_config"] = {
            self.network: self.client.api.create_endpoint_config(aliases=[service.name])
        }

    def start_sidecars(
        self,
        images: dict[str, ResolvedImage],
        base_config: Callable[[str, str], tuple[dict[str, Any], set[str]]],
    ) -> None:
        """Create and start every service but main, each once its dependencies are as asked.
        `base_config(image_id, name)` is the agent's container configuration for another image and name."""
        for service in self.project.sidecars:
            self.wait_for(service)
            name = f"{self.prefix}-{service.name}"
            config, enforced = base_config(images[service.name].image_id, name)
            for key in PID1_KEYS:
                config.pop(key, None)  # the service's own program, not Regatta's pid 1
            config.update(
                hostname=service.name,
                mounts=self.mounts(service),  # no log folders: those are the agent's
                environment=service.environment,
                entrypoint=service.entrypoint,
                command=service.command,
                user=service.user,
                init=service.init,
            )
            if service.working_dir:
                config["working_dir"] = service.working_dir
            if service.healthcheck is not None:
                check = service.healthcheck
                config["healthcheck"] = Healthcheck(
                    test=check.test,
                    interval=check.interval_ns,
                    timeout=check.timeout_ns,
                    retries=check.retries,
                    start_period=check.start_period_ns,
                )
            self.attach(config, service)
            container = create_container(self.client, config, enforced, self.log)
            self.containers[service.name] = str(container.id)
            container.start()
            self.log.info("compose service %s started", service.name)

    def wait_for(self, service: Service) -> None:
        """Until every dependency of `service` is as its condition asks (ComposeStartError if it cannot)."""
        for dependency, condition in service.depends_on.items():
            if condition == "service_healthy":
                self._healthy(dependency)
            elif condition == "service_completed_successfully":
                self._completed(dependency)

    def _deadline(self, name: str) -> float:
        check = self.project.services[name].healthcheck
        budget = 120.0
        if check is not None:
            interval = (check.interval_ns or 30 * 10**9) / 1e9
            timeout = (check.timeout_ns or 30 * 10**9) / 1e9
            retries = 3 if check.retries is None else check.retries
            budget = (check.start_period_ns or 0) / 1e9 + (interval + timeout) * (retries + 1) + 30
        return time.monotonic() + min(budget, MAX_WAIT_SEC)

    def _healthy(self, name: str) -> None:
        deadline = self._deadline(name)
        while True:
            state = self.client.api.inspect_container(self.containers[name])["State"]
            health = state.get("Health")
            if health is None:
                raise ComposeStartError(
                    f"service {name!r} has no healthcheck, but a service waits for it to be healthy"
                )
            status = health.get("Status")
            if status == "healthy":
                return
            if status == "unhealthy" or state.get("Status") in ("exited", "dead"):
                raise ComposeStartError(
                    f"service {name!r} is {status or state.get('Status')}{_last_check(health)}"
                )
            if time.monotonic() > deadline:
                raise ComposeStartError(
                    f"service {name!r} did not become healthy in time{_last_check(health)}"
                )
            time.sleep(_POLL_SEC)

    def _completed(self, name: str) -> None:
        remaining = max(1.0, self._deadline(name) - time.monotonic())
        try:
            status = self.client.api.wait(self.containers[name], timeout=remaining)
        except Exception as exc:  # the engine's read timeout: it is still running
            raise ComposeStartError(f"service {name!r} did not finish in time") from exc
        code = int(status.get("StatusCode", -1))
        if code != 0:
            raise ComposeStartError(f"service {name!r} exited with status {code}")

    def stop(self, delete: bool) -> None:
        """Remove (or, when not deleting, only kill) the sidecars, then the network, its rules and the
        volumes; the agent's container must be gone already for the network and volumes to go."""
        for ident in self.containers.values():
            with contextlib.suppress(NotFound):
                try:
                    if delete:
                        self.client.api.remove_container(ident, force=True, v=True)
                    else:
                        self.client.api.kill(ident)
                except APIError as exc:
                    if exc.status_code != 409:  # 409: being removed, or not running
                        raise
        if not delete:
            return
        self.containers.clear()
        # Best effort from here: what stays (a container the engine would not remove still holds the
        # network) is logged; it and its rules stay until a later executor on this host sweeps them.
        if self.network:
            try:
                self.client.api.remove_network(self.network)
            except NotFound:
                pass
            except APIError as exc:
                self.log.warning("cannot remove network %s: %s", self.network, exc)
                return
        if self._rules and self.gateway is not None:
            release_bridge(self.bridge, self.gateway)
            self._rules = False
        for engine_name in self.volumes.values():
            try:
                self.client.api.remove_volume(engine_name, force=True)
            except NotFound:
                pass
            except APIError as exc:
                self.log.warning("cannot remove volume %s: %s", engine_name, exc)
        self.volumes.clear()


def release_bridge(bridge: str, gateway: ipaddress.IPv4Address) -> None:
    """An attempt bridge's forwarder (if any) and rules, once its network is gone."""
    try:
        with dns.bridge_lock(bridge):
            dns.stop_forwarder(bridge)
            network._remove_rules(attempt_rules(bridge, gateway))
            dns.forget_bridge(bridge)
    except (dns.ForwarderError, NetworkIsolationError) as exc:
        logger.warning("cannot release bridge %s: %s", bridge, exc)


def network_gateway(client: docker.DockerClient, name: str) -> ipaddress.IPv4Address | None:
    try:
        return network.gateway_address(client, name)
    except NetworkIsolationError:
        return None


def _last_check(health: dict[str, Any]) -> str:
    runs = health.get("Log") or []
    if not runs:
        return ""
    output = str(runs[-1].get("Output") or "").strip()
    shown = "".join(char if char.isprintable() else " " for char in output[-300:])
    return f" (last check, exit {runs[-1].get('ExitCode')}: {shown})"


def sweep(client: docker.DockerClient, owners_dir: Path) -> list[str]:
    """Remove this host's Regatta networks (and their rules) and volumes whose owner executor is dead
    (janitor.sweep removes their containers first); returns their names."""
    labels = [
        f"{LABEL_MANAGED}=1",
        f"{LABEL_HOST}={host_name()}",
        f"{LABEL_OWNERS}={janitor.owners_label(owners_dir)}",
    ]
    me = janitor.owner_id(owners_dir)
    removed = []
    for made in client.networks.list(filters={"label": labels}):
        owner = (made.attrs.get("Labels") or {}).get(LABEL_OWNER, "")
        if owner == me or janitor.owner_alive(owners_dir, owner):
            continue
        bridge = (made.attrs.get("Options") or {}).get(OPTION_BRIDGE, "")
        try:
            gateway = network_gateway(client, str(made.name))
            made.remove()
        except (NotFound, APIError) as exc:
            logger.warning("cannot remove network %s: %s", made.name, exc)
            continue
        if bridge.startswith(BRIDGE_PREFIX) and dns.valid_bridge(bridge) and gateway is not None:
            release_bridge(bridge, gateway)
        removed.append(str(made.name))
    for volume in client.volumes.list(filters={"label": labels}):
        owner = (volume.attrs.get("Labels") or {}).get(LABEL_OWNER, "")
        if owner == me or janitor.owner_alive(owners_dir, owner):
            continue
        with contextlib.suppress(NotFound, APIError):  # in use: a later sweep
            volume.remove(force=True)
            removed.append(str(volume.name))
    return removed
