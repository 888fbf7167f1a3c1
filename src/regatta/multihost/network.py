"""The test bridge in the root network namespace, and one network namespace per executor host joined
to it by a veth pair: each host reaches the NATS cluster on the bridge's address, and nothing else of
the machine but what the root namespace routes for it (no NAT, no default route)."""

from __future__ import annotations

import ipaddress
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

# Interface names are at most 15 bytes: "<name>b" for the bridge, "<name>h<N>" for a host's veth.
_NAME = re.compile(r"^[a-z][a-z0-9]{1,7}$")
NETNS_DIR = Path("/run/netns")


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def _routed_networks() -> list[ipaddress.IPv4Network]:
    routes = ip("-4", "route", "show", "table", "all").stdout.split()
    found = []
    for word in routes:
        try:
            found.append(ipaddress.IPv4Network(word, strict=False))
        except ValueError:
            continue
    return found


def free_subnet(first: int = 231, last: int = 250) -> ipaddress.IPv4Network:
    """A /24 of 10.<first..last>.x.0 that no route of this machine overlaps (another helper's or a
    Docker network's), so a host's traffic goes to our bridge and nowhere else."""
    taken = _routed_networks()
    for second in range(first, last + 1):
        for third in range(0, 256, 7):
            candidate = ipaddress.IPv4Network(f"10.{second}.{third}.0/24")
            if not any(candidate.overlaps(net) for net in taken if net.prefixlen > 0):
                return candidate
    raise RuntimeError("no free 10.x.y.0/24 for the multi-host bridge")


@dataclass
class Network:
    name: str
    subnet: ipaddress.IPv4Network
    hosts: dict[int, str] = field(default_factory=dict)  # index -> netns name

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"network name {self.name!r}: 2-8 lowercase letters and digits, a letter first")

    @property
    def bridge(self) -> str:
        return f"{self.name}b"

    @property
    def gateway_address(self) -> str:
        """The bridge's address: where the root namespace's services (NATS) listen for the hosts."""
        return str(self.subnet.network_address + 1)

    def address(self, index: int) -> str:
        if not 1 <= index <= 200:
            raise ValueError(f"host index {index}: 1-200")
        return str(self.subnet.network_address + 10 + index)

    def netns(self, index: int) -> str:
        return f"{self.name}-{index}"

    def veth(self, index: int) -> str:
        return f"{self.name}h{index}"

    def create(self) -> None:
        ip("link", "add", self.bridge, "type", "bridge")
        ip("addr", "add", f"{self.gateway_address}/{self.subnet.prefixlen}", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")

    def add_host(self, index: int) -> str:
        """The host's namespace with `eth0` at `address(index)` on the bridge; its name."""
        netns, veth = self.netns(index), self.veth(index)
        ip("netns", "add", netns)
        self.hosts[index] = netns
        ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns)
        ip("link", "set", veth, "master", self.bridge, "up")
        ip("-n", netns, "addr", "add", f"{self.address(index)}/{self.subnet.prefixlen}", "dev", "eth0")
        ip("-n", netns, "link", "set", "eth0", "up")
        ip("-n", netns, "link", "set", "lo", "up")
        return netns

    def partition(self, index: int) -> None:
        """Cut the host off the bus: its veth down, so its packets go nowhere (its TCP connections
        time out, as across a failed switch), until `heal`."""
        ip("link", "set", self.veth(index), "down")

    def heal(self, index: int) -> None:
        ip("link", "set", self.veth(index), "up")

    def remove_host(self, index: int) -> None:
        ip("link", "del", self.veth(index), check=False)
        ip("netns", "del", self.netns(index), check=False)
        self.hosts.pop(index, None)

    def remove(self) -> None:
        """Every host namespace and veth, then the bridge; what is already gone is skipped."""
        for index in list(self.hosts):
            self.remove_host(index)
        for leftover in NETNS_DIR.glob(f"{self.name}-*") if NETNS_DIR.exists() else ():
            ip("netns", "del", leftover.name, check=False)
        ip("link", "del", self.bridge, check=False)
