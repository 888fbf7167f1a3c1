"""The DNS forwarder of the sandbox bridge: name resolution for `public` tasks whatever the host's resolver.

Docker 20.10's embedded DNS (127.0.0.11 in every container on a user-defined network, build steps of
the classic builder included) forwards a query from the CONTAINER's network namespace, with the
container's address as source, to the host's nameservers. Those are private (10.x on cloud machines),
link-local or loopback (127.0.0.53 on desktops) nearly everywhere, and the sandbox's firewall drops
traffic from the bridge to all three (network.py), so without help nothing resolves. Letting the
bridge reach the host's resolver would open a private address to every task; instead one dnsmasq
runs in the HOST namespace, bound to the bridge's gateway address only, forwarding to the host's
upstreams, and network.py redirects (DNAT) every port-53 packet arriving from the bridge to it. The
redirect catches the embedded DNS's queries whatever upstream it picked, a build step's as well as
an attempt's (the classic builder has no `dns` parameter), and a task's direct query to any server.

It is never an open resolver: it listens on the gateway address alone, and the firewall accepts
port 53 on that address only from the bridge and drops it from every other interface (the host's
own loopback included). There is one forwarder per bridge on the host, whatever executor or state
folder asked for it: its pid file and lock live in RUN_DIR, and a second dnsmasq could not bind the
same address anyway.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# Host-wide: the bridge is one per host, so is its forwarder (tmpfs: no stale pid survives a reboot).
RUN_DIR = Path(os.environ.get("REGATTA_NETWORK_RUN_DIR") or "/run/regatta-network")
RESOLV_CONF = Path("/etc/resolv.conf")
_BRIDGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,14}$")
_MAX_UPSTREAMS = 8
_START_TIMEOUT_SEC = 10


class ForwarderError(RuntimeError):
    """The sandbox's DNS forwarder cannot be configured or started."""


def parse_upstreams(values: Sequence[str]) -> tuple[Address, ...]:
    """Nameserver addresses, each parsed (an address, never an option or a name), at most a few."""
    if len(values) > _MAX_UPSTREAMS:
        raise ForwarderError(f"at most {_MAX_UPSTREAMS} DNS upstreams, got {len(values)}")
    found: list[Address] = []
    for value in values:
        if not isinstance(value, str) or len(value) > 64:
            raise ForwarderError(f"not a nameserver address: {value!r:.80}")
        try:
            address = ipaddress.ip_address(value.strip())
        except ValueError:
            raise ForwarderError(f"not a nameserver address: {value!r:.80}") from None
        if address.is_unspecified or address.is_multicast:
            raise ForwarderError(f"not a nameserver address: {value!r:.80}")
        if address not in found:
            found.append(address)
    return tuple(found)


def host_upstreams(resolv_conf: Path = RESOLV_CONF) -> tuple[Address, ...]:
    """The host's nameservers (`nameserver` lines of resolv.conf; zone ids dropped)."""
    try:
        text = resolv_conf.read_text(encoding="utf-8", errors="replace")[:65536]
    except OSError as exc:
        raise ForwarderError(f"cannot read {resolv_conf}: {exc}") from exc
    values = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] == "nameserver":
            values.append(fields[1].split("%", 1)[0])
    upstreams = parse_upstreams(values[:_MAX_UPSTREAMS])
    if not upstreams:
        raise ForwarderError(f"{resolv_conf} names no nameserver: set sandbox_dns_upstreams")
    return upstreams


def forwarder_argv(
    dnsmasq: str, bridge: str, listen: ipaddress.IPv4Address, upstreams: Sequence[Address], pid_file: Path
) -> list[str]:
    """dnsmasq's command line: no configuration but this one, no host files, no DHCP, only `listen`."""
    if not _BRIDGE.match(bridge):
        raise ForwarderError(f"invalid bridge name {bridge!r}")
    if not isinstance(listen, ipaddress.IPv4Address) or not upstreams:
        raise ForwarderError("the forwarder needs an IPv4 listen address and at least one upstream")
    if listen in upstreams:
        raise ForwarderError(f"the forwarder cannot be its own upstream ({listen})")
    return [
        dnsmasq,
        "--conf-file=/dev/null",  # never /etc/dnsmasq.conf or /etc/dnsmasq.d
        "--no-resolv",
        "--no-hosts",  # the host's /etc/hosts names are not the sandbox's business
        "--no-poll",
        "--bind-interfaces",
        f"--listen-address={listen}",
        "--port=53",
        "--cache-size=1000",
        *(f"--server={upstream}" for upstream in upstreams),
        f"--pid-file={pid_file}",
    ]


def pid_file(bridge: str) -> Path:
    return RUN_DIR / f"dns-{bridge}.pid"


@contextlib.contextmanager
def bridge_lock(bridge: str) -> Iterator[None]:
    """The host-wide lock of one bridge's network, firewall rules and forwarder."""
    if not _BRIDGE.match(bridge):
        raise ForwarderError(f"invalid bridge name {bridge!r}")
    try:
        RUN_DIR.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(RUN_DIR / f"{bridge}.lock", os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise ForwarderError(f"cannot lock the sandbox bridge in {RUN_DIR}: {exc}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def valid_bridge(bridge: str) -> bool:
    return bool(_BRIDGE.match(bridge))


def forget_bridge(bridge: str) -> None:
    """Remove a bridge's lock file once the bridge is gone (call holding its lock: nothing else may
    use the bridge any more)."""
    with contextlib.suppress(FileNotFoundError):
        (RUN_DIR / f"{bridge}.lock").unlink()


def running_process(pid_file: Path) -> tuple[int, list[str]] | None:
    """The pid and command line of the dnsmasq `pid_file` names, if it is alive."""
    try:
        pid = int(pid_file.read_text().strip()[:16])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    argv = [part.decode(errors="replace") for part in cmdline if part]
    # A recycled pid is some other process (and a zombie has no command line): neither names the file.
    if f"--pid-file={pid_file}" not in argv:
        return None
    return pid, argv


def forwarder_alive(bridge: str, argv: Sequence[str]) -> bool:
    """Cheap (two small reads, no subprocess): whether the forwarder runs with exactly `argv`."""
    running = running_process(pid_file(bridge))
    return running is not None and running[1] == list(argv)


def stop_process(path: Path) -> None:
    """End the dnsmasq `path` names (only if its command line names that file) and remove the file."""
    running = running_process(path)
    if running is not None:
        pid = running[0]
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while running_process(path) is not None and time.monotonic() < deadline:
            time.sleep(0.02)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def stop_forwarder(bridge: str) -> None:
    stop_process(pid_file(bridge))


def ensure_forwarder(bridge: str, listen: ipaddress.IPv4Address, upstreams: Sequence[Address]) -> list[str]:
    """The bridge's forwarder runs with these upstreams (started, or restarted if it died or its
    upstreams changed); returns its argv. Call under `bridge_lock`."""
    dnsmasq = shutil.which("dnsmasq")
    if dnsmasq is None:
        raise ForwarderError("dnsmasq is not installed (Debian package dnsmasq-base)")
    argv = forwarder_argv(dnsmasq, bridge, listen, upstreams, pid_file(bridge))
    if forwarder_alive(bridge, argv):
        return argv
    stop_forwarder(bridge)
    # dnsmasq daemonizes once it listens; the parent's exit status and stderr report a failed start
    # (address in use, address missing). stderr goes to a file: the daemon must not hold our pipe.
    with tempfile.TemporaryFile() as errors:
        try:
            started = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=errors,
                timeout=_START_TIMEOUT_SEC,
                start_new_session=True,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise ForwarderError("dnsmasq did not start in time") from exc
        errors.seek(0)
        message = errors.read(2000).decode(errors="replace").strip()
    if started.returncode != 0 or not forwarder_alive(bridge, argv):
        raise ForwarderError(f"dnsmasq did not start on {listen}: {message or started.returncode}")
    return argv
