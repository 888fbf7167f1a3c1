"""The bridge network `public` tasks run on, and the firewall rules that keep the host out of reach.

A container on a bridge can reach every address of the host itself (the bridge gateway, the host's
LAN address: the packets go through INPUT, not FORWARD) and, through FORWARD, every other network the
host routes to — the stack's NATS, gateway and database among them. So the network is created with
inter-container traffic off, and two rules are installed: INPUT drops everything arriving from the
bridge (no host service answers a sandbox), DOCKER-USER drops forwarded traffic from the bridge to
private, link-local (cloud metadata) and shared address ranges. What remains is the public internet.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import threading
from pathlib import Path

import docker
from docker.errors import NotFound

from regatta_executor.container.engine import LABEL_MANAGED

BLOCKED_RANGES = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "100.64.0.0/10")
_BRIDGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,14}$")  # an interface name, never an option
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_lock = threading.Lock()
_ready: set[tuple[str, str]] = set()


class NetworkIsolationError(RuntimeError):
    """The sandbox network cannot be made or isolated; no public task may run without it."""


def ensure_sandbox_network(client: docker.DockerClient, name: str, bridge: str, state_dir: Path) -> str:
    """The isolated bridge network `name` (created once, also across processes); returns its name."""
    if not _NAME.match(name) or not _BRIDGE.match(bridge):
        raise NetworkIsolationError(f"invalid sandbox network name {name!r} or bridge {bridge!r}")
    key = (name, bridge)
    with _lock:
        if key in _ready:
            return name
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(state_dir / "network.lock", os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            _create_network(client, name, bridge)
            _install_rules(bridge)
        finally:
            os.close(fd)
        _ready.add(key)
    return name


def _create_network(client: docker.DockerClient, name: str, bridge: str) -> None:
    try:
        network = client.networks.get(name)
    except NotFound:
        client.networks.create(
            name,
            driver="bridge",
            labels={LABEL_MANAGED: "1"},
            options={
                "com.docker.network.bridge.name": bridge,
                "com.docker.network.bridge.enable_icc": "false",
                "com.docker.network.bridge.enable_ip_masquerade": "true",
            },
        )
        return
    options = network.attrs.get("Options") or {}
    if (network.attrs.get("Labels") or {}).get(LABEL_MANAGED) != "1" or options.get(
        "com.docker.network.bridge.name"
    ) != bridge:
        raise NetworkIsolationError(
            f"network {name!r} exists but was not made by Regatta with bridge {bridge!r}; "
            "remove it or choose another sandbox_network"
        )


def rules(bridge: str) -> list[list[str]]:
    """The iptables rules (chain first) that isolate `bridge` from the host and private networks."""
    found = [["INPUT", "-i", bridge, "-j", "DROP"]]
    found += [["DOCKER-USER", "-i", bridge, "-d", cidr, "-j", "DROP"] for cidr in BLOCKED_RANGES]
    return found


def _install_rules(bridge: str) -> None:
    iptables = shutil.which("iptables")
    if iptables is None:
        raise NetworkIsolationError("iptables is not installed: cannot isolate the sandbox network")
    # DOCKER-USER exists once the engine has set up its own rules; make sure, then insert ours first.
    subprocess.run([iptables, "-w", "-N", "DOCKER-USER"], capture_output=True, check=False)
    for rule in rules(bridge):
        chain, spec = rule[0], rule[1:]
        present = subprocess.run([iptables, "-w", "-C", chain, *spec], capture_output=True, check=False)
        if present.returncode == 0:
            continue
        added = subprocess.run(
            [iptables, "-w", "-I", chain, "1", *spec], capture_output=True, text=True, check=False
        )
        if added.returncode != 0:
            raise NetworkIsolationError(f"cannot add iptables rule {' '.join(rule)}: {added.stderr.strip()}")
