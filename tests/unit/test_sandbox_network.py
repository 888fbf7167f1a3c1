"""The routes that keep a public sandbox away from the host and private networks."""

from __future__ import annotations

import ipaddress

from regatta_executor.local.network import DNS_SERVER, SLIRP_NETWORK, blocking_routes


def _blocked(routes: list[str]) -> list[ipaddress.IPv4Network]:
    return [ipaddress.IPv4Network(line.split()[-1]) for line in routes]


def test_host_addresses_and_their_networks_are_blocked_even_when_public() -> None:
    host = [ipaddress.IPv4Interface("203.0.113.7/28"), ipaddress.IPv4Interface("172.17.0.1/16")]
    blocked = _blocked(blocking_routes(host))

    for address in ("203.0.113.7", "203.0.113.1", "172.17.0.2", "169.254.169.254", "192.168.1.1", "10.1.2.3"):
        assert any(ipaddress.IPv4Address(address) in network for network in blocked), address
    assert not any(ipaddress.IPv4Address(a) in n for a in ("1.1.1.1", "203.0.113.80") for n in blocked)


def test_slirps_own_network_stays_reachable() -> None:
    """10.0.0.0/8 is blocked, but the kernel prefers slirp4netns's more specific /24 (DNS forwarder)."""
    blocked = _blocked(blocking_routes([ipaddress.IPv4Interface("10.0.2.100/24")]))
    assert ipaddress.IPv4Address(DNS_SERVER) in SLIRP_NETWORK
    assert all(
        network.prefixlen < SLIRP_NETWORK.prefixlen for network in blocked if SLIRP_NETWORK.overlaps(network)
    )
