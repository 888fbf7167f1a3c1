"""The outbound guard's and git value checks' pure parts: which addresses are internal, what an
allow-list entry opens, which git values are refused before git sees them."""

from __future__ import annotations

import ipaddress

import pytest
from regatta_shared.security.git_values import (
    GitValueInvalid,
    check_commit,
    check_ref,
    check_repo_path,
    url_kind,
)
from regatta_shared.security.outbound import (
    OutboundPolicy,
    OutboundRefused,
    check_addresses,
    embedded_ipv4,
    is_public,
)

INTERNAL = [
    "127.0.0.1", "127.8.9.10", "10.0.0.1", "172.16.5.4", "192.168.1.1", "169.254.169.254", "100.64.0.1",
    "0.0.0.0", "224.0.0.1", "255.255.255.255", "::1", "::", "fe80::1", "fd00::1", "fc00::5", "ff02::1",
    "::ffff:127.0.0.1", "::ffff:10.0.0.1",
]  # fmt: skip
NAMES_THE_SETTING = " unless REGATTA_OUTBOUND_ALLOW names it$"
# Internal IPv4 addresses in the IPv6 forms that carry them (issue 37), and deprecated site-local space.
INTERNAL_IN_IPV6 = [
    "::7f00:1",  # IPv4-compatible 127.0.0.1
    "::a9fe:a9fe",  # IPv4-compatible 169.254.169.254
    "::ffff:0:7f00:1",  # IPv4-translated 127.0.0.1
    "64:ff9b::a9fe:a9fe",  # NAT64 well-known prefix, 169.254.169.254
    "64:ff9b::a00:1",  # NAT64 well-known prefix, 10.0.0.1
    "64:ff9b:1::a00:1",  # NAT64 local-use prefix, /96 layout, 10.0.0.1
    "64:ff9b:1:a00:0:100::",  # NAT64 local-use prefix, /48 layout, 10.0.0.1
    "64:ff9b:1:808:c0:a801:100:0",  # NAT64 local-use prefix: public in every layout but /64 (192.168.1.1)
    "2002:7f00:1::1",  # 6to4 of 127.0.0.1
    "2002:c0a8:101::1",  # 6to4 of 192.168.1.1
    "2001:0:a00:1::f7f7:f7f7",  # Teredo: server 10.0.0.1, client 8.8.8.8
    "2001:0:808:808::80ff:fffe",  # Teredo: server 8.8.8.8, client 127.0.0.1
    "fec0::1",  # site-local
    "feff::1",  # site-local
]


@pytest.mark.parametrize("address", INTERNAL)
def test_internal_addresses_are_not_public(address: str) -> None:
    assert not is_public(ipaddress.ip_address(address))
    with pytest.raises(
        OutboundRefused,
        match=r"^could not fetch registry_url: address not allowed" + NAMES_THE_SETTING,
    ):
        check_addresses("example.org", 443, [address], "registry_url", OutboundPolicy())


@pytest.mark.parametrize("address", INTERNAL_IN_IPV6)
def test_internal_ipv4_in_ipv6_forms_and_site_local_are_refused(address: str) -> None:
    with pytest.raises(
        OutboundRefused,
        match=r"^could not fetch url: address not allowed" + NAMES_THE_SETTING,
    ):
        check_addresses("example.org", 443, [address], "url", OutboundPolicy())


@pytest.mark.parametrize(
    ("address", "carried"),
    [
        ("::ffff:8.8.8.8", ["8.8.8.8"]),
        ("::7f00:1", ["127.0.0.1"]),
        ("::ffff:0:808:808", ["8.8.8.8"]),
        ("64:ff9b::808:808", ["8.8.8.8"]),
        ("64:ff9b:1:a00:0:100::", ["10.0.0.1", "0.0.1.0", "0.1.0.0", "0.0.0.0"]),
        ("2002:808:808::1", ["8.8.8.8"]),
        # RFC 4380's example: server 65.54.227.120, client 192.0.2.45 (its last 32 bits inverted).
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", ["65.54.227.120", "192.0.2.45"]),
        ("2606:4700::1111", []),
        ("fec0::1", []),
    ],
)
def test_the_ipv4_addresses_an_ipv6_address_carries(address: str, carried: list[str]) -> None:
    assert [str(a) for a in embedded_ipv4(ipaddress.IPv6Address(address))] == carried


@pytest.mark.parametrize(
    "address", ["::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1", "2606:4700::1111", "8.8.8.8"]
)
def test_public_ipv4_in_ipv6_forms_and_public_ipv6_pass(address: str) -> None:
    assert is_public(ipaddress.ip_address(address))


def test_one_internal_answer_refuses_the_host() -> None:
    with pytest.raises(OutboundRefused):
        check_addresses("rebind.example", 443, ["93.184.216.34", "127.0.0.1"], "url", OutboundPolicy())
    assert check_addresses("ok.example", 443, ["93.184.216.34"], "url", OutboundPolicy())


def test_allow_list_entries_open_exactly_what_they_name() -> None:
    policy = OutboundPolicy.parse("10.1.0.0/16, 127.0.0.1:8080, [::1]:9000, registry.internal, 192.168.0.7")
    loop, v6 = ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")
    assert policy.allows("127.0.0.1", 8080, loop) and not policy.allows("127.0.0.1", 8081, loop)
    assert policy.allows("::1", 9000, v6) and not policy.allows("::1", 9001, v6)
    assert policy.allows("x", 1, ipaddress.ip_address("10.1.200.3"))
    assert not policy.allows("x", 1, ipaddress.ip_address("10.2.0.1"))
    assert policy.allows("registry.internal", 443, ipaddress.ip_address("10.9.9.9"))
    assert policy.allows("x", 22, ipaddress.ip_address("192.168.0.7"))
    assert not OutboundPolicy.parse("").allows("localhost", 80, loop)


@pytest.mark.parametrize(
    "value",
    [
        "--upload-pack=sh -c 'touch /tmp/x'",
        "-x",
        "a..b",
        "main branch",
        "a\nb",
        "x" * 300,
        "refs/heads/a.lock",
        "",
    ],
)
def test_refs_that_git_would_read_as_options_or_refuse_are_refused(value: str) -> None:
    with pytest.raises(GitValueInvalid, match="git_commit_id must be a branch, tag or commit id"):
        check_commit(value, "git_commit_id")


def test_commit_ids_and_ref_names_pass() -> None:
    assert check_ref("a" * 40, "ref") == "a" * 40 and check_ref("b" * 64, "ref") == "b" * 64
    assert check_ref("v1.2", "ref") == "v1.2" and check_ref("feature/x", "ref") == "feature/x"
    assert check_commit(None, "c") is None


@pytest.mark.parametrize(
    ("url", "kind"),
    [("https://example.org/r.git", "https"), ("ssh://git@example.org/r.git", "ssh"),
     ("git@example.org:org/r.git", "ssh"), ("/srv/repo", "local"), ("file:///srv/repo", "local")],
)  # fmt: skip
def test_git_urls_of_allowed_kinds(url: str, kind: str) -> None:
    assert url_kind(url, "git_url") == kind


@pytest.mark.parametrize(
    "url",
    ["git://example.org/r", "http://example.org/r", "ext::sh -c touch% /tmp/x", "--upload-pack=x",
     "ssh://-oProxyCommand=x/r", "file://host/srv/repo", "fd::x", "https://exa mple.org/r"],
)  # fmt: skip
def test_other_git_urls_are_refused(url: str) -> None:
    with pytest.raises(GitValueInvalid):
        url_kind(url, "git_url")


@pytest.mark.parametrize("path", ["../x", "tasks/../../x", "/etc", "-x", "a\\b", ""])
def test_repository_paths_stay_inside(path: str) -> None:
    with pytest.raises(GitValueInvalid):
        check_repo_path(path, "path")
