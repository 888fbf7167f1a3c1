"""The sandbox network's names and its forwarder's upstreams reach `iptables`, `dnsmasq` and the engine:
only values of their kind get there."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from regatta_executor.container.network import dns
from regatta_executor.container.network.bridge import NetworkIsolationError, ensure_sandbox_network


@pytest.mark.parametrize(
    ("name", "bridge"),
    [
        ("regatta-sandbox", "-jACCEPT"),  # an option where iptables expects an interface
        ("regatta-sandbox", "--flush"),
        ("regatta-sandbox", "regatta0; rm"),
        ("regatta-sandbox", "a" * 16),  # longer than an interface name may be
        ("-regatta", "regatta0"),
        ("regatta sandbox", "regatta0"),
    ],
)
def test_names_that_are_not_names_are_refused_before_anything_runs(
    name: str, bridge: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dns, "RUN_DIR", tmp_path / "run")
    # No client: a refused name must be refused before the engine or iptables is asked anything.
    with pytest.raises(NetworkIsolationError, match="invalid sandbox network name"):
        ensure_sandbox_network(None, name, bridge)  # type: ignore[arg-type]
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "upstream",
    [
        "--server=1.1.1.1",  # an option where dnsmasq expects an address
        "1.1.1.1 --conf-file=/tmp/x",
        "dns.example.com",  # a name: the forwarder would have to resolve it through itself
        "0.0.0.0",
        "224.0.0.1",
        "1.1.1.1/32",
        "1" * 100,
    ],
)
def test_upstreams_that_are_not_addresses_are_refused(upstream: str) -> None:
    with pytest.raises(dns.ForwarderError, match="not a nameserver address"):
        dns.parse_upstreams([upstream])


def test_the_hosts_resolv_conf_gives_the_upstreams(tmp_path: Path) -> None:
    conf = tmp_path / "resolv.conf"
    conf.write_text(
        "# comment\nsearch example\nnameserver 10.255.255.53\nnameserver fe80::1%eth0\noptions x\n"
    )
    assert dns.host_upstreams(conf) == (
        ipaddress.ip_address("10.255.255.53"),
        ipaddress.ip_address("fe80::1"),
    )
    conf.write_text("nameserver --port=5353\n")
    with pytest.raises(dns.ForwarderError):
        dns.host_upstreams(conf)
    conf.write_text("search example\n")
    with pytest.raises(dns.ForwarderError, match="names no nameserver"):
        dns.host_upstreams(conf)


def test_the_forwarder_reads_no_configuration_and_listens_on_the_gateway_only(tmp_path: Path) -> None:
    gateway = ipaddress.IPv4Address("172.30.0.1")
    argv = dns.forwarder_argv(
        "dnsmasq", "regatta0", gateway, dns.parse_upstreams(["10.0.0.2"]), tmp_path / "p"
    )
    assert "--conf-file=/dev/null" in argv and "--no-hosts" in argv and "--bind-interfaces" in argv
    assert [a for a in argv if a.startswith("--listen-address")] == ["--listen-address=172.30.0.1"]
    assert [a for a in argv if a.startswith("--server")] == ["--server=10.0.0.2"]
    with pytest.raises(dns.ForwarderError, match="its own upstream"):
        dns.forwarder_argv("dnsmasq", "regatta0", gateway, (gateway,), tmp_path / "p")
