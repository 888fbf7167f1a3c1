"""The outbound guard: which network addresses a fetch on a user's behalf may reach.

Registry URLs, git remotes, the hub, webhook targets, Dockerfile `ADD` URLs and image registries are
written by users (or by a registry's JSON), so without a guard they reach the deployment's own network:
loopback services, cloud metadata (169.254.169.254), private, unique-local and site-local ranges, or the
same through an IPv6 form that carries an IPv4 address (mapped, compatible, translated, NAT64, 6to4,
Teredo: `is_public` decides on the IPv4 inside). Every resolved address of a host is checked (one bad
address refuses the host), and the HTTP transports below connect to the very address that was checked,
so a DNS answer that changes between check and connect (rebinding) cannot slip through; a redirect opens
a new connection and is checked the same way. `REGATTA_OUTBOUND_ALLOW` names exceptions (CIDRs, hosts,
host:port). Errors name the field and a short reason class only: never the remote's content, and the
same words whether an internal port is open or closed.
"""

from __future__ import annotations

import ipaddress
import socket
import typing
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

import anyio
import httpcore
import httpx

from .answers import AnswerBounds, AnswerRefused, AsyncBoundedTransport, BoundedTransport, BoundsOf

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# Reason classes: the only words an outbound error carries after "could not fetch <field>:". A refused
# address names the setting that would allow it, so whoever reads the refusal knows what to ask for.
NOT_ALLOWED = "address not allowed unless REGATTA_OUTBOUND_ALLOW names it"
NO_NAME = "name does not resolve"
BAD_URL = "not an allowed URL"
UNREACHABLE = "unreachable"
TIMED_OUT = "timed out"


class OutboundRefused(Exception):
    """A fetch that must not happen or did not succeed; `str()` is safe to show to the user."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"could not fetch {field}: {reason}")
        self.field = field
        self.reason = reason


@dataclass(frozen=True)
class OutboundPolicy:
    networks: tuple[Network, ...] = ()
    hosts: frozenset[str] = frozenset()  # a host name or address, any port
    endpoints: frozenset[tuple[str, int]] = frozenset()  # host (name or address), port

    @classmethod
    def parse(cls, text: str | None) -> OutboundPolicy:
        """Comma-separated: `10.0.0.0/8`, `127.0.0.1`, `registry.internal`, `127.0.0.1:8080`, `[::1]:80`."""
        networks: list[Network] = []
        hosts: set[str] = set()
        endpoints: set[tuple[str, int]] = set()
        for raw in (text or "").split(","):
            entry = raw.strip().lower()
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
                continue
            except ValueError:
                pass
            host, port = _split_host_port(entry)
            if port is None:
                hosts.add(host)
            else:
                endpoints.add((host, port))
        return cls(tuple(networks), frozenset(hosts), frozenset(endpoints))

    def allows(self, host: str, port: int, address: Address) -> bool:
        if is_public(address):
            return True
        names = {host.lower().strip("[]"), str(address)}
        if names & self.hosts or any((name, port) in self.endpoints for name in names):
            return True
        return any(address.version == net.version and address in net for net in self.networks)


def _split_host_port(entry: str) -> tuple[str, int | None]:
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") and rest[1:].isdigit() else None
    host, sep, port = entry.rpartition(":")
    if sep and port.isdigit() and ":" not in host:
        return host, int(port)
    return entry, None


SITE_LOCAL = ipaddress.IPv6Network("fec0::/10")  # deprecated (RFC 3879), still routed inside some sites
IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
IPV4_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")  # SIIT (RFC 2765)
NAT64_WELL_KNOWN = ipaddress.IPv6Network("64:ff9b::/96")  # RFC 6052, always the /96 layout
NAT64_LOCAL_USE = ipaddress.IPv6Network("64:ff9b:1::/48")  # RFC 8215, any RFC 6052 prefix length >= 48
# Which bytes of the address hold the IPv4 one for each RFC 6052 prefix length a local-use prefix may
# have (byte 8, bits 64-71, never does).
RFC6052_IPV4_BYTES = {48: (6, 7, 9, 10), 56: (7, 9, 10, 11), 64: (9, 10, 11, 12), 96: (12, 13, 14, 15)}


def embedded_ipv4(address: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, ...]:
    """The IPv4 addresses an IPv6 one reaches through a dual-stack socket, a translator or a tunnel:
    IPv4-mapped, IPv4-compatible, IPv4-translated, NAT64 (well-known and local-use), 6to4 and Teredo
    (its server and its client). A local-use NAT64 address gives the IPv4 address of every prefix length
    its translator might use, since the address does not say which. Empty for any other address."""
    if address.ipv4_mapped is not None:
        return (address.ipv4_mapped,)
    if address in IPV4_COMPATIBLE or address in IPV4_TRANSLATED or address in NAT64_WELL_KNOWN:
        return (ipaddress.IPv4Address(int(address) & 0xFFFFFFFF),)
    if address in NAT64_LOCAL_USE:
        packed = address.packed
        return tuple(
            ipaddress.IPv4Address(bytes(packed[i] for i in where)) for where in RFC6052_IPV4_BYTES.values()
        )
    if address.sixtofour is not None:
        return (address.sixtofour,)
    if address.teredo is not None:
        return address.teredo  # (server: bits 32-63, client: the last 32 bits inverted)
    return ()


def is_public(address: Address) -> bool:
    """Globally routable unicast only: loopback, link-local, private, unique-local, site-local, CGNAT,
    reserved, multicast and unspecified addresses are internal, and so is an IPv6 address that carries
    an internal IPv4 one (embedded_ipv4): each IPv4 it carries is decided as an IPv4 address."""
    if isinstance(address, ipaddress.IPv6Address):
        if address in SITE_LOCAL:
            return False
        carried = embedded_ipv4(address)
        if carried:
            return all(is_public(inner) for inner in carried)
    return address.is_global and not address.is_multicast


def check_addresses(
    host: str, port: int, addresses: Iterable[str], field: str, policy: OutboundPolicy
) -> list[Address]:
    parsed = [ipaddress.ip_address(a.split("%", 1)[0]) for a in addresses]
    if not parsed:
        raise OutboundRefused(field, NO_NAME)
    if not all(policy.allows(host, port, a) for a in parsed):
        raise OutboundRefused(field, NOT_ALLOWED)
    return parsed


def resolve(host: str, port: int, field: str, policy: OutboundPolicy) -> list[Address]:
    """Every address `host` resolves to, each checked; refused if any is internal and not allowed."""
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError, ValueError):
        raise OutboundRefused(field, NO_NAME) from None
    return check_addresses(host, port, (str(info[4][0]) for info in infos), field, policy)


async def resolve_async(host: str, port: int, field: str, policy: OutboundPolicy) -> list[Address]:
    try:
        infos = await anyio.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError, ValueError):
        raise OutboundRefused(field, NO_NAME) from None
    return check_addresses(host, port, (str(info[4][0]) for info in infos), field, policy)


def url_endpoint(url: str, field: str, schemes: Iterable[str] = ("http", "https")) -> tuple[str, int]:
    """The host and port of an absolute URL with one of `schemes`, or refused as not an allowed URL."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise OutboundRefused(field, BAD_URL) from None
    scheme = parts.scheme.lower()
    if scheme not in schemes or not parts.hostname:
        raise OutboundRefused(field, BAD_URL)
    default = {"http": 80, "https": 443, "ssh": 22, "git": 9418}.get(scheme, 443)
    return parts.hostname, port or default


def check_url(
    url: str, field: str, policy: OutboundPolicy, schemes: Iterable[str] = ("http", "https")
) -> list[Address]:
    host, port = url_endpoint(url, field, schemes)
    return resolve(host, port, field, policy)


def reason_of(error: BaseException) -> str:
    """The reason class of a failed fetch: the same for a closed port, a reset or a bad TLS handshake."""
    if isinstance(error, OutboundRefused | AnswerRefused):
        return error.reason
    if isinstance(error, httpx.TimeoutException | TimeoutError):
        return TIMED_OUT
    if isinstance(error, httpx.HTTPStatusError):
        return f"HTTP {error.response.status_code}"
    return UNREACHABLE


# --- HTTP transports that connect only to checked addresses ---------------------------------------


class _GuardedBackend(httpcore.NetworkBackend):
    def __init__(self, policy: OutboundPolicy, field: str) -> None:
        self._inner = httpcore.SyncBackend()
        self._policy = policy
        self._field = field

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[typing.Any] | None = None,
    ) -> httpcore.NetworkStream:
        # Connect to the address that was checked, not to a second lookup of the name; TLS still
        # verifies the certificate against the URL's host name (httpcore passes it as server_hostname).
        address = resolve(host, port, self._field, self._policy)[0]
        return self._inner.connect_tcp(str(address), port, timeout, local_address, socket_options)

    def connect_unix_socket(self, *args: typing.Any, **kwargs: typing.Any) -> httpcore.NetworkStream:
        raise OutboundRefused(self._field, NOT_ALLOWED)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class _AsyncGuardedBackend(httpcore.AsyncNetworkBackend):
    def __init__(self, policy: OutboundPolicy, field: str) -> None:
        self._inner = httpcore.AnyIOBackend()
        self._policy = policy
        self._field = field

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[typing.Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        address = (await resolve_async(host, port, self._field, self._policy))[0]
        return await self._inner.connect_tcp(str(address), port, timeout, local_address, socket_options)

    async def connect_unix_socket(
        self, *args: typing.Any, **kwargs: typing.Any
    ) -> httpcore.AsyncNetworkStream:
        raise OutboundRefused(self._field, NOT_ALLOWED)

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def guarded_client(
    policy: OutboundPolicy, field: str, answers: AnswerBounds | BoundsOf | None = None, **kwargs: typing.Any
) -> httpx.Client:
    """An httpx client whose every connection (redirects too) goes only to an allowed address, and
    whose every answer, with `answers`, is read within those bounds (regatta_shared.security.answers).
    No proxies from the environment: a proxy would make the checked address the proxy's."""
    transport = httpx.HTTPTransport(trust_env=False)
    transport._pool._network_backend = _GuardedBackend(policy, field)
    bounded = BoundedTransport(transport, answers) if answers is not None else transport
    return httpx.Client(transport=bounded, trust_env=False, **kwargs)


def guarded_async_client(
    policy: OutboundPolicy, field: str, answers: AnswerBounds | BoundsOf | None = None, **kwargs: typing.Any
) -> httpx.AsyncClient:
    transport = httpx.AsyncHTTPTransport(trust_env=False)
    transport._pool._network_backend = _AsyncGuardedBackend(policy, field)
    bounded = AsyncBoundedTransport(transport, answers) if answers is not None else transport
    return httpx.AsyncClient(transport=bounded, trust_env=False, **kwargs)
