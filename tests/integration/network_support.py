"""Hosts the network tests make themselves: a network namespace behind a veth pair with a private /30
(a resolver or a listener on a private address, as a cloud machine's resolver is), DNS queries by
hand, and a sandbox network of the test's own that is removed afterwards."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import shutil
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
from regatta_executor.container.network.bridge import remove_sandbox_network

from tests.conftest import unavailable


@dataclass(frozen=True)
class Namespace:
    name: str
    host_address: str
    """The host's end of the veth pair."""
    address: str
    """The namespace's end."""

    def run(self, *argv: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ip", "netns", "exec", self.name, *argv], capture_output=True, text=True, check=True, **kwargs
        )


def _used_networks() -> list[ipaddress.IPv4Network]:
    out = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True, check=True).stdout
    routes = subprocess.run(["ip", "-4", "route"], capture_output=True, text=True, check=True).stdout
    found = [ipaddress.ip_interface(line.split()[3]).network for line in out.splitlines()]
    for line in routes.splitlines():
        with contextlib.suppress(ValueError):
            found.append(ipaddress.ip_network(line.split()[0], strict=False))
    return found


@contextlib.contextmanager
def private_namespace() -> Iterator[Namespace]:
    """A network namespace on a random unused 10.200.x.y/30, reachable from the host only."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        unavailable("network namespaces need root and iproute2")
    used = _used_networks()
    for _ in range(50):
        subnet = ipaddress.ip_network(f"10.200.{secrets.randbelow(256)}.{secrets.randbelow(64) * 4}/30")
        if not any(subnet.overlaps(other) for other in used if other.prefixlen > 0):
            break
    else:
        raise RuntimeError("no unused /30 in 10.200.0.0/16")
    host, inside = (str(a) for a in subnet.hosts())
    tag = secrets.token_hex(3)
    name, host_if, ns_if = f"rgt-test-{tag}", f"rgt{tag}h", f"rgt{tag}n"
    commands = [
        ["ip", "netns", "add", name],
        ["ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if],
        ["ip", "link", "set", ns_if, "netns", name],
        ["ip", "addr", "add", f"{host}/30", "dev", host_if],
        ["ip", "link", "set", host_if, "up"],
        ["ip", "netns", "exec", name, "ip", "addr", "add", f"{inside}/30", "dev", ns_if],
        ["ip", "netns", "exec", name, "ip", "link", "set", ns_if, "up"],
        ["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"],
    ]
    try:
        for command in commands:
            subprocess.run(command, capture_output=True, text=True, check=True)
        yield Namespace(name, host, inside)
    finally:
        subprocess.run(["ip", "link", "del", host_if], capture_output=True, check=False)
        for pid in subprocess.run(
            ["ip", "netns", "pids", name], capture_output=True, text=True, check=False
        ).stdout.split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), 9)
        subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)


@contextlib.contextmanager
def resolver_in(namespace: Namespace, records: dict[str, str], workdir: Path) -> Iterator[str]:
    """A dnsmasq inside `namespace` answering only `records` (name -> IPv4 address); yields its address."""
    if shutil.which("dnsmasq") is None:
        unavailable("dnsmasq is not installed (Debian package dnsmasq-base)")
    pid_file = workdir / f"{namespace.name}-dns.pid"
    namespace.run(
        "dnsmasq",
        "--conf-file=/dev/null",
        "--no-resolv",
        "--no-hosts",
        "--bind-interfaces",
        f"--listen-address={namespace.address}",
        f"--pid-file={pid_file}",
        *(f"--address=/{name}/{address}" for name, address in records.items()),
    )
    try:
        yield namespace.address
    finally:
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pid_file.read_text()), 15)


def dns_query(server: str, name: str, timeout: float = 2.0) -> list[str] | None:
    """The A records `server`:53 gives for `name` ([] for an answer without any), None if it does not
    answer at all."""
    ident = secrets.randbelow(65536)
    question = b"".join(bytes([len(label)]) + label.encode() for label in name.split(".")) + b"\0"
    packet = struct.pack(">HHHHHH", ident, 0x0100, 1, 0, 0, 0) + question + struct.pack(">HH", 1, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout)
        sock.sendto(packet, (server, 53))
        try:
            reply = sock.recv(4096)
        except TimeoutError:
            return None
    return parse_a_records(reply, ident)


def parse_a_records(reply: bytes, ident: int) -> list[str]:
    got, flags, qd, an = struct.unpack(">HHHH", reply[:8])
    assert got == ident
    if flags & 0x000F:  # rcode: NXDOMAIN, REFUSED, ...
        return []
    offset = 12
    for _ in range(qd):
        while reply[offset]:
            offset += reply[offset] + 1
        offset += 5
    found = []
    for _ in range(an):
        offset += 2 if reply[offset] & 0xC0 == 0xC0 else _name_length(reply, offset)
        kind, _cls, _ttl, length = struct.unpack(">HHIH", reply[offset : offset + 10])
        offset += 10
        if kind == 1 and length == 4:
            found.append(socket.inet_ntoa(reply[offset : offset + 4]))
        offset += length
    return found


def _name_length(reply: bytes, offset: int) -> int:
    start = offset
    while reply[offset] and reply[offset] & 0xC0 != 0xC0:
        offset += reply[offset] + 1
    return offset - start + (2 if reply[offset] else 1)


DNS_QUERY_SCRIPT = """
import secrets, socket, struct, sys
name = sys.argv[2]
ident = secrets.randbelow(65536)
q = b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\\0"
packet = struct.pack(">HHHHHH", ident, 0x0100, 1, 0, 0, 0) + q + struct.pack(">HH", 1, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(2)
s.sendto(packet, (sys.argv[1], 53))
try:
    s.recv(4096)
    print("answered")
except TimeoutError:
    print("silent")
"""


@contextlib.contextmanager
def own_sandbox_network(engine: docker.DockerClient) -> Iterator[dict[str, str]]:
    """Names of sandbox networks and bridges (public and allowlist) of this test only (the container
    environment creates them); removed, with their rules, sets and forwarder, at the end."""
    tag = secrets.token_hex(3)
    names = {
        "sandbox_network": f"regatta-test-{tag}",
        "sandbox_bridge": f"rgtsb{tag}",
        "allowlist_network": f"regatta-test-allow-{tag}",
        "allowlist_bridge": f"rgtal{tag}",
    }
    try:
        yield names
    finally:
        remove_sandbox_network(engine, names["sandbox_network"], names["sandbox_bridge"])
        remove_sandbox_network(engine, names["allowlist_network"], names["allowlist_bridge"])


@contextlib.contextmanager
def http_listener(namespace: Namespace, port: int = 8080) -> Iterator[str]:
    """A small HTTP server on the namespace's address; yields that address."""
    server = subprocess.Popen(
        ["ip", "netns", "exec", namespace.name, sys.executable, "-m", "http.server", "--bind",
         namespace.address, str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for _ in range(200):
            if namespace.run("ss", "-ltn", f"sport = :{port}").stdout.count("LISTEN"):
                break
            time.sleep(0.025)
        yield namespace.address
    finally:
        server.kill()
        server.wait()
