"""An allowlist's entries reach dnsmasq's and ipset's argv: only names, wildcards, addresses and CIDRs
get there, each as what it is, and a name never smuggles a server, a pattern or an option in."""

from __future__ import annotations

import ipaddress

import pytest
from regatta_executor.container.network import allowlist, dns


@pytest.mark.parametrize(
    "entry",
    [
        "evil.example/8.8.8.8",  # would add `--server=/evil.example/8.8.8.8/...`: a second upstream
        "example.com/#",
        "#",
        "--conf-file=/etc/passwd",
        "a..example.com",
        "*.*.example.com",
        "ex ample.com",
        "example.com:443",
        "https://example.com",
        "*",
        "*.",
        "-example.com",
        "x" * 254,
    ],
)
def test_entries_that_are_not_hosts_are_refused(entry: str) -> None:
    with pytest.raises(allowlist.AllowlistError, match="not an allowed_hosts entry"):
        allowlist.parse_allowed([entry])


def test_names_wildcards_and_networks_reach_the_resolver_as_such() -> None:
    allowed = allowlist.parse_allowed(
        [
            "API.Example.com.",
            "*.cdn.example.net",
            "192.0.2.7",
            "198.51.100.0/24",
            "2001:db8::1",
            "cdn.example.net",
            "img.cdn.example.net",
        ]
    )
    assert allowed.names == ("api.example.com", "cdn.example.net", "img.cdn.example.net")
    assert allowed.wildcards == ("cdn.example.net",)
    assert allowed.networks == (ipaddress.ip_network("192.0.2.7/32"), ipaddress.ip_network("198.51.100.0/24"))
    state = allowlist.AttemptState("0123456789ab", "regatta1", "c", "172.30.0.2", "172.30.0.1", 30000)
    argv = allowlist.resolver_argv("dnsmasq", state, allowed, dns.parse_upstreams(["10.0.0.2"]))
    assert (
        "--conf-file=/dev/null" in argv and "--listen-address=172.30.0.1" in argv and "--port=30000" in argv
    )
    servers = [a for a in argv if a.startswith("--server")]
    assert servers == [
        "--server=/api.example.com/10.0.0.2",
        "--server=/cdn.example.net/10.0.0.2",
        "--server=/img.cdn.example.net/10.0.0.2",
        "--server=/*.cdn.example.net/10.0.0.2",
    ]
    # An exact name admits no subdomain unless a wildcard allows them; every other name: NXDOMAIN.
    assert [a for a in argv if a.startswith("--address")] == [
        "--address=/*.api.example.com/",
        "--address=/#/",
    ]
    assert argv[-1] == "--address=/#/"


def test_too_many_entries_are_refused() -> None:
    with pytest.raises(allowlist.AllowlistError, match="at most"):
        allowlist.parse_allowed([f"h{i}.example.com" for i in range(allowlist.MAX_ENTRIES + 1)])


def test_only_ipv4_networks_of_the_operators_exceptions_reach_the_blocked_set() -> None:
    assert allowlist.outbound_exceptions(
        "10.200.0.0/16, registry.internal,127.0.0.1:8080, 192.168.1.5,::1"
    ) == (
        ipaddress.ip_network("10.200.0.0/16"),
        ipaddress.ip_network("192.168.1.5/32"),
    )
