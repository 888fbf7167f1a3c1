"""The bridge network `public` tasks run on, and the firewall rules that keep the host out of reach.

A container on a bridge can reach every address of the host itself (the bridge gateway, the host's
LAN address: the packets go through INPUT, not FORWARD) and, through FORWARD, every other network the
host routes to — the stack's NATS, gateway and database among them. So the network is created with
inter-container traffic off, and rules are installed: INPUT drops everything arriving from the
bridge (no host service answers a sandbox), DOCKER-USER drops forwarded traffic from the bridge to
private, link-local (cloud metadata) and shared address ranges. What remains is the public internet.

The one exception is DNS: every port-53 packet from the bridge is redirected (nat PREROUTING) to the
bridge's own forwarder on the gateway address (dns.py says why the host's resolver cannot be used),
and INPUT accepts exactly that, before its DROP, while dropping port 53 on the gateway address from
every other interface so the forwarder never answers the host's LAN.

The network, its rules and its forwarder are host-wide, so they are set up under a host-wide lock per
bridge (dns.bridge_lock), not the executor's state folder.
"""

from __future__ import annotations

import ipaddress
import re
import shutil
import subprocess
import threading
from collections.abc import Sequence

import docker
from docker.errors import NotFound

from regatta_executor.container.engine import LABEL_MANAGED
from regatta_executor.container.network import allowlist, dns

BLOCKED_RANGES = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "100.64.0.0/10")
_BRIDGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,14}$")  # an interface name, never an option
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_lock = threading.Lock()
# (network, bridge) -> the forwarder's argv, for the cheap check before each attempt.
_ready: dict[tuple[str, str], list[str]] = {}
_allowlist_ready: dict[tuple[str, str, tuple[ipaddress.IPv4Network, ...]], ipaddress.IPv4Address] = {}

Rule = tuple[str, str, list[str]]  # table, chain, rule spec


class NetworkIsolationError(RuntimeError):
    """The sandbox network cannot be made or isolated; no public task may run without it."""


def ensure_sandbox_network(
    client: docker.DockerClient,
    name: str,
    bridge: str,
    dns_upstreams: Sequence[str] = (),
) -> str:
    """The isolated bridge network `name` with its DNS forwarder (created once, also across processes;
    the forwarder restarted if it died); returns its name. `dns_upstreams`: the forwarder's upstream
    nameservers (default: the host's, from /etc/resolv.conf)."""
    if not _NAME.match(name) or not _BRIDGE.match(bridge):
        raise NetworkIsolationError(f"invalid sandbox network name {name!r} or bridge {bridge!r}")
    key = (name, bridge)
    with _lock:
        if key in _ready and dns.forwarder_alive(bridge, _ready[key]):
            return name
        try:
            upstreams = dns.parse_upstreams(list(dns_upstreams)) or dns.host_upstreams()
            with dns.bridge_lock(bridge):
                _create_network(client, name, bridge)
                gateway = gateway_address(client, name)
                argv = dns.ensure_forwarder(bridge, gateway, upstreams)
                _install_rules(rules(bridge, gateway))
        except dns.ForwarderError as exc:
            raise NetworkIsolationError(str(exc)) from exc
        _ready[key] = argv
    return name


def ensure_allowlist_network(
    client: docker.DockerClient, name: str, bridge: str, outbound_allow: str | None
) -> ipaddress.IPv4Address:
    """The bridge network of `allowlist` tasks: nothing forwarded from it and nothing of the host
    reachable until an attempt's own rules open its allowed hosts (allowlist.py); returns its gateway.
    `outbound_allow` (REGATTA_OUTBOUND_ALLOW) names the private networks allowed hosts may be in."""
    if not _NAME.match(name) or not _BRIDGE.match(bridge):
        raise NetworkIsolationError(f"invalid allowlist network name {name!r} or bridge {bridge!r}")
    exceptions = allowlist.outbound_exceptions(outbound_allow)
    key = (name, bridge, exceptions)
    with _lock:
        if key in _allowlist_ready:
            return _allowlist_ready[key]
        try:
            with dns.bridge_lock(bridge):
                _create_network(client, name, bridge)
                gateway = gateway_address(client, name)
                allowlist.install_blocked_set(bridge, exceptions)
                _install_rules(allowlist_rules(bridge, gateway))
        except (dns.ForwarderError, allowlist.AllowlistError) as exc:
            raise NetworkIsolationError(str(exc)) from exc
        _allowlist_ready[key] = gateway
    return gateway


def remove_sandbox_network(client: docker.DockerClient, name: str, bridge: str) -> None:
    """Undo `ensure_sandbox_network` or `ensure_allowlist_network`: the forwarder, the rules, the
    blocked set and the network (no container may be left on it)."""
    if not _NAME.match(name) or not _BRIDGE.match(bridge):
        raise NetworkIsolationError(f"invalid sandbox network name {name!r} or bridge {bridge!r}")
    with _lock, dns.bridge_lock(bridge):
        _ready.pop((name, bridge), None)
        for key in [key for key in _allowlist_ready if key[:2] == (name, bridge)]:
            _allowlist_ready.pop(key)
        dns.stop_forwarder(bridge)
        try:
            gateway = gateway_address(client, name)
        except NotFound:
            return
        _remove_rules(rules(bridge, gateway) + allowlist_rules(bridge, gateway))
        allowlist.remove_blocked_set(bridge)
        client.networks.get(name).remove()
        dns.forget_bridge(bridge)


def gateway_address(client: docker.DockerClient, name: str) -> ipaddress.IPv4Address:
    """The bridge's own address on the host (where the forwarder listens)."""
    configs = (client.networks.get(name).attrs.get("IPAM") or {}).get("Config") or []
    for config in configs:
        try:
            gateway = ipaddress.ip_address(str(config.get("Gateway", "")).split("/", 1)[0])
            subnet = ipaddress.ip_network(str(config.get("Subnet", "")), strict=False)
        except ValueError:
            continue
        if isinstance(gateway, ipaddress.IPv4Address) and gateway in subnet and not gateway.is_loopback:
            return gateway
    raise NetworkIsolationError(f"network {name!r} has no IPv4 gateway address")


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


def rules(bridge: str, gateway: ipaddress.IPv4Address) -> list[Rule]:
    """The iptables rules that isolate `bridge` from the host and private networks and give it the
    forwarder on `gateway`, in the order they must take at the head of each chain."""
    if not _BRIDGE.match(bridge) or not isinstance(gateway, ipaddress.IPv4Address):
        raise NetworkIsolationError(f"invalid bridge {bridge!r} or gateway {gateway!r}")
    gw = str(gateway)
    found: list[Rule] = []
    for proto in ("udp", "tcp"):
        found.append(
            (
                "nat",
                "PREROUTING",
                ["-i", bridge, "-p", proto, "--dport", "53", "-j", "DNAT", "--to-destination", f"{gw}:53"],
            )
        )
    for proto in ("udp", "tcp"):
        found.append(
            ("filter", "INPUT", ["-i", bridge, "-d", gw, "-p", proto, "--dport", "53", "-j", "ACCEPT"])
        )
    found.append(("filter", "INPUT", ["-i", bridge, "-j", "DROP"]))
    for proto in ("udp", "tcp"):
        found.append(
            ("filter", "INPUT", ["!", "-i", bridge, "-d", gw, "-p", proto, "--dport", "53", "-j", "DROP"])
        )
    found += [("filter", "DOCKER-USER", ["-i", bridge, "-d", cidr, "-j", "DROP"]) for cidr in BLOCKED_RANGES]
    return found


def allowlist_rules(bridge: str, gateway: ipaddress.IPv4Address) -> list[Rule]:
    """The allowlist bridge's own rules: it reaches nothing (forwarded or on the host, DNS included)
    but what an attempt's rules, inserted above these, open; nothing but the bridge reaches its
    gateway address (where the attempts' resolvers listen)."""
    if not _BRIDGE.match(bridge) or not isinstance(gateway, ipaddress.IPv4Address):
        raise NetworkIsolationError(f"invalid bridge {bridge!r} or gateway {gateway!r}")
    return [
        ("filter", "INPUT", ["-i", bridge, "-j", "DROP"]),
        ("filter", "INPUT", ["!", "-i", bridge, "-d", str(gateway), "-j", "DROP"]),
        ("filter", "DOCKER-USER", ["-i", bridge, "-j", "DROP"]),
    ]


def _iptables() -> str:
    iptables = shutil.which("iptables")
    if iptables is None:
        raise NetworkIsolationError("iptables is not installed: cannot isolate the sandbox network")
    return iptables


def _install_rules(wanted: list[Rule]) -> None:
    iptables = _iptables()
    # DOCKER-USER exists once the engine has set up its own rules; make sure, then insert ours first.
    subprocess.run([iptables, "-w", "-N", "DOCKER-USER"], capture_output=True, check=False)
    # Inserted at the head in reverse, so that each chain starts with its rules in the listed order
    # (the DNS ACCEPT before the DROP) also where an older set of them is already there.
    for table, chain, spec in reversed(wanted):
        present = subprocess.run(
            [iptables, "-w", "-t", table, "-C", chain, *spec], capture_output=True, check=False
        )
        if present.returncode == 0:
            continue
        added = subprocess.run(
            [iptables, "-w", "-t", table, "-I", chain, "1", *spec],
            capture_output=True,
            text=True,
            check=False,
        )
        if added.returncode != 0:
            raise NetworkIsolationError(
                f"cannot add iptables rule {table} {chain} {' '.join(spec)}: {added.stderr.strip()}"
            )


def _remove_rules(installed: list[Rule]) -> None:
    iptables = _iptables()
    for table, chain, spec in installed:
        for _ in range(8):  # duplicates, if any were ever made
            deleted = subprocess.run(
                [iptables, "-w", "-t", table, "-D", chain, *spec], capture_output=True, check=False
            )
            if deleted.returncode != 0:
                break
