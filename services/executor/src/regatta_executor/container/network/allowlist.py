"""`allowlist` tasks (Harbor's NetworkPolicy.allowed_hosts): the attempt reaches exactly the hosts,
`*.wildcard` names, addresses and CIDRs its task names, and nothing else.

Harbor's docker environment puts a transparent proxy sidecar in front of the task; here the edge is
the host's own firewall, per attempt. Allowlist containers live on a bridge of their own (network.py
sets it up) whose forwarded traffic is dropped by default, so a container is shut in before its
attempt's rules exist. Each attempt then gets, keyed on its container's address:

- an ipset of allowed destinations: the task's addresses and CIDRs, plus every address its own dnsmasq
  resolves an allowed name to (`--ipset`, so a name is reachable at what it resolves to right now);
- one DOCKER-USER rule letting the container reach that set, unless the destination is in the
  bridge's blocked set (private, link-local, loopback, shared and multicast ranges minus the networks
  the operator's REGATTA_OUTBOUND_ALLOW names): an allowed name that resolves to a private address
  (rebinding) still gets nowhere;
- its own dnsmasq on the bridge's gateway, on a port of its own, that forwards only the allowed names
  and answers NXDOMAIN for every other (an exact name does not admit its subdomains: `*.` names do,
  as in Harbor), with a DNAT of the container's port-53 traffic to it and an INPUT rule for exactly
  that port from exactly that address.

Spoofing another container's source address needs raw sockets or interface changes (NET_RAW and
NET_ADMIN are never granted), and inter-container traffic is off. IPv6 entries are accepted (Harbor
does) but never reachable: the bridge has no IPv6. Everything an attempt adds is recorded in a state
file first and removed when it ends; `sweep` removes what a killed executor left.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import docker
from docker.errors import NotFound

from regatta_executor.container.network import dns

MAX_ENTRIES = 256
_HOST_LABEL = re.compile(r"^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$")
_ATTEMPT = re.compile(r"^[0-9a-f]{12}$")
_CONTAINER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_PORTS = (20000, 60000)
# What an allowed name may never resolve its way into (REGATTA_OUTBOUND_ALLOW excepted).
BLOCKED_RANGES = (
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "224.0.0.0/3",
)


class AllowlistError(RuntimeError):
    """The allowlist cannot be enforced; the attempt must not run without it."""


@dataclass(frozen=True)
class Allowed:
    names: tuple[str, ...]
    wildcards: tuple[str, ...]
    """Suffixes whose subdomains are allowed (`*.example.com` -> `example.com`)."""
    networks: tuple[ipaddress.IPv4Network, ...]


def parse_allowed(entries: Sequence[str]) -> Allowed:
    """Harbor's allowed_hosts entries, validated again here: each reaches dnsmasq's or ipset's argv."""
    if len(entries) > MAX_ENTRIES:
        raise AllowlistError(f"at most {MAX_ENTRIES} allowed_hosts entries, got {len(entries)}")
    names: list[str] = []
    wildcards: list[str] = []
    networks: list[ipaddress.IPv4Network] = []
    for raw in entries:
        if not isinstance(raw, str) or len(raw) > 253:
            raise AllowlistError(f"not an allowed_hosts entry: {raw!r:.80}")
        entry = raw.strip().lower().rstrip(".")
        try:
            network = ipaddress.ip_network(entry, strict=True)
        except ValueError:
            pass
        else:
            if isinstance(network, ipaddress.IPv4Network):
                networks.append(network)
            continue  # IPv6: the bridge has none, so nothing to open
        wildcard = entry.startswith("*.")
        name = entry[2:] if wildcard else entry
        labels = name.split(".")
        if not name or not all(_HOST_LABEL.match(label) for label in labels):
            raise AllowlistError(f"not an allowed_hosts entry: {raw!r:.80}")
        (wildcards if wildcard else names).append(name)
    return Allowed(tuple(dict.fromkeys(names)), tuple(dict.fromkeys(wildcards)), tuple(networks))


def outbound_exceptions(text: str | None) -> tuple[ipaddress.IPv4Network, ...]:
    """The IPv4 networks and addresses REGATTA_OUTBOUND_ALLOW names (its names and host:port entries
    mean nothing to a firewall)."""
    found = []
    for raw in (text or "").split(","):
        with contextlib.suppress(ValueError):
            network = ipaddress.ip_network(raw.strip(), strict=False)
            if isinstance(network, ipaddress.IPv4Network):
                found.append(network)
    return tuple(found)


def blocked_set(bridge: str) -> str:
    return f"rgt-blk-{bridge}"


def _ipset() -> str:
    found = shutil.which("ipset")
    if found is None:
        raise AllowlistError("ipset is not installed (Debian package ipset)")
    return found


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def _must(argv: list[str]) -> None:
    done = _run(argv)
    if done.returncode != 0:
        raise AllowlistError(f"{' '.join(argv[:4])}: {done.stderr.strip()[:300]}")


def install_blocked_set(bridge: str, exceptions: Iterable[ipaddress.IPv4Network]) -> str:
    """The bridge's blocked set, replaced atomically (never an empty set in between). Call under the
    bridge's lock."""
    ipset = _ipset()
    live, staging = blocked_set(bridge), f"rgt-new-{bridge}"
    _run([ipset, "destroy", staging])
    _must([ipset, "create", staging, "hash:net", "family", "inet"])
    exceptions = list(exceptions)
    if not any(network.prefixlen == 0 for network in exceptions):
        for cidr in BLOCKED_RANGES:
            _must([ipset, "add", staging, cidr])
        for network in exceptions:
            # `nomatch`: an address of this network is not in the set although a blocked range holds it.
            _must([ipset, "add", "-exist", staging, str(network), "nomatch"])
    if _run([ipset, "list", "-n", live]).returncode != 0:
        _must([ipset, "rename", staging, live])
    else:
        _must([ipset, "swap", staging, live])
        _run([ipset, "destroy", staging])
    return live


def remove_blocked_set(bridge: str) -> None:
    if shutil.which("ipset"):
        _run([_ipset(), "destroy", blocked_set(bridge)])


@dataclass(frozen=True)
class AttemptState:
    attempt: str
    bridge: str
    container: str
    address: str
    gateway: str
    port: int

    @property
    def set_name(self) -> str:
        return f"rgt-a-{self.attempt}"

    @property
    def pid_file(self) -> Path:
        return dns.RUN_DIR / f"allow-{self.attempt}.pid"

    @property
    def state_file(self) -> Path:
        return dns.RUN_DIR / f"allow-{self.attempt}.json"

    def rules(self) -> list[tuple[str, str, list[str]]]:
        """The attempt's iptables rules (table, chain, spec), each matched on its container's address."""
        src = ["-i", self.bridge, "-s", self.address]
        found: list[tuple[str, str, list[str]]] = [
            (
                "filter",
                "DOCKER-USER",
                [
                    *src,
                    "-m", "set", "--match-set", self.set_name, "dst",
                    "-m", "set", "!", "--match-set", blocked_set(self.bridge), "dst",
                    "-j", "RETURN",
                ],
            )
        ]  # fmt: skip
        for proto in ("udp", "tcp"):
            found.append(
                (
                    "nat",
                    "PREROUTING",
                    [*src, "-p", proto, "--dport", "53", "-j", "DNAT",
                     "--to-destination", f"{self.gateway}:{self.port}"],
                )
            )  # fmt: skip
            found.append(
                (
                    "filter",
                    "INPUT",
                    [*src, "-d", self.gateway, "-p", proto, "--dport", str(self.port), "-j", "ACCEPT"],
                )
            )
        return found

    @classmethod
    def load(cls, path: Path) -> AttemptState | None:
        try:
            data = json.loads(path.read_text()[:4096])
            state = cls(**{key: data[key] for key in cls.__dataclass_fields__})
        except (OSError, ValueError, TypeError, KeyError):
            return None
        if not (
            _ATTEMPT.match(str(state.attempt))
            and dns.valid_bridge(str(state.bridge))
            and _CONTAINER.match(str(state.container))
            and isinstance(state.port, int)
        ):
            return None
        try:
            ipaddress.IPv4Address(state.address)
            ipaddress.IPv4Address(state.gateway)
        except ValueError:
            return None
        return state


def resolver_argv(
    dnsmasq: str, state: AttemptState, allowed: Allowed, upstreams: Sequence[dns.Address]
) -> list[str]:
    """The attempt's dnsmasq: only allowed names are forwarded (their answers added to its set)."""
    argv = [
        dnsmasq,
        "--conf-file=/dev/null",
        "--no-resolv",
        "--no-hosts",
        "--no-poll",
        "--bind-interfaces",
        f"--listen-address={state.gateway}",
        f"--port={state.port}",
        f"--pid-file={state.pid_file}",
    ]
    for pattern in [*allowed.names, *(f"*.{suffix}" for suffix in allowed.wildcards)]:
        argv += [f"--server=/{pattern}/{upstream}" for upstream in upstreams]
        argv.append(f"--ipset=/{pattern}/{state.set_name}")
    for name in allowed.names:
        # An exact name: its subdomains are not allowed, unless a wildcard allows them.
        if not any(name == suffix or name.endswith(f".{suffix}") for suffix in allowed.wildcards):
            argv.append(f"--address=/*.{name}/")
    argv.append("--address=/#/")  # every other name: NXDOMAIN
    return argv


def open_attempt(
    *,
    bridge: str,
    gateway: ipaddress.IPv4Address,
    container: str,
    address: str,
    allowed_hosts: Sequence[str],
    upstreams: Sequence[dns.Address],
) -> AttemptState:
    """Open the allowed destinations to `container` (at `address` on `bridge`). Everything made is
    recorded first, so `close_attempt` (or `sweep`) can remove it whatever step failed."""
    allowed = parse_allowed(allowed_hosts)
    dnsmasq = shutil.which("dnsmasq")
    if dnsmasq is None:
        raise AllowlistError("dnsmasq is not installed (Debian package dnsmasq-base)")
    if not dns.valid_bridge(bridge) or not _CONTAINER.match(container):
        raise AllowlistError(f"invalid bridge {bridge!r} or container {container!r}")
    source = ipaddress.IPv4Address(address)
    ipset = _ipset()
    dns.RUN_DIR.mkdir(parents=True, exist_ok=True, mode=0o700)
    last_error = ""
    for _ in range(8):
        port = _PORTS[0] + secrets.randbelow(_PORTS[1] - _PORTS[0])
        state = AttemptState(secrets.token_hex(6), bridge, container, str(source), str(gateway), port)
        _write_state(state)
        try:
            _must([ipset, "create", state.set_name, "hash:net", "family", "inet"])
            for network in allowed.networks:
                _must([ipset, "add", "-exist", state.set_name, str(network)])
            started = _start_resolver(resolver_argv(dnsmasq, state, allowed, upstreams))
            if started is not None:
                close_attempt(state)
                last_error = started
                continue  # most likely the port was taken: another one
            _insert_rules(state.rules())
            return state
        except BaseException:
            close_attempt(state)
            raise
    raise AllowlistError(f"the attempt's DNS resolver did not start: {last_error}")


def close_attempt(state: AttemptState) -> None:
    """Remove the attempt's rules, resolver and set (each at most once; missing ones are fine)."""
    iptables = shutil.which("iptables") or "iptables"
    for table, chain, spec in state.rules():
        for _ in range(4):
            if _run([iptables, "-w", "-t", table, "-D", chain, *spec]).returncode != 0:
                break
    dns.stop_process(state.pid_file)
    if shutil.which("ipset"):
        _run([_ipset(), "destroy", state.set_name])
    with contextlib.suppress(FileNotFoundError):
        state.state_file.unlink()


def sweep(client: docker.DockerClient) -> list[str]:
    """Close the attempts whose container is gone (their executor died before closing them)."""
    closed = []
    for path in sorted(dns.RUN_DIR.glob("allow-*.json")) if dns.RUN_DIR.is_dir() else []:
        state = AttemptState.load(path)
        if state is None:
            continue
        try:
            running = client.containers.get(state.container).status in ("created", "running", "paused")
        except NotFound:
            running = False
        if not running:
            close_attempt(state)
            closed.append(state.attempt)
    return closed


def _write_state(state: AttemptState) -> None:
    fd, temporary = tempfile.mkstemp(dir=dns.RUN_DIR, prefix=".allow-")
    with os.fdopen(fd, "w") as out:
        json.dump(asdict(state), out)
    os.replace(temporary, state.state_file)


def _start_resolver(argv: list[str]) -> str | None:
    """None once dnsmasq runs; else what it said."""
    with tempfile.TemporaryFile() as errors:
        try:
            done = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=errors,
                timeout=10,
                start_new_session=True,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return "dnsmasq did not start in time"
        errors.seek(0)
        message = errors.read(2000).decode(errors="replace").strip()
    return None if done.returncode == 0 else (message or f"exit status {done.returncode}")


def _insert_rules(wanted: list[tuple[str, str, list[str]]]) -> None:
    iptables = shutil.which("iptables")
    if iptables is None:
        raise AllowlistError("iptables is not installed")
    for table, chain, spec in wanted:
        _must([iptables, "-w", "-t", table, "-I", chain, "1", *spec])
