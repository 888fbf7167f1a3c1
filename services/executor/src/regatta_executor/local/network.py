"""Outbound network of a `public` sandbox: slirp4netns in user mode, attached to the sandbox's own
network namespace, plus routes inside that namespace that keep the host and private networks out.

Threat: the stack's NATS, gateway and database listen on the host (loopback, the host's addresses, a
Docker bridge); a task that allows the network must reach the internet and nothing of those. So:
- the sandbox never shares the host's network namespace (bubblewrap always unshares it);
- slirp4netns runs with --disable-host-loopback, so its gateway address (10.0.2.2) does not lead to
  the host's 127.0.0.1;
- inside the namespace, unreachable routes cover every address of the host, the networks the host
  is on (its LAN, Docker bridges) and every private, link-local (cloud metadata), shared (CGNAT),
  multicast and reserved IPv4 range; only slirp4netns's own 10.0.2.0/24 (gateway refused, DNS
  forwarder at 10.0.2.3) stays reachable. The sandbox has no CAP_NET_ADMIN and
  cannot remove them. There is no IPv6 (slirp4netns runs without --enable-ipv6).
slirp4netns itself runs sandboxed (its own mount namespace, seccomp) and exits with the executor's end
of its exit pipe, so a crashed executor leaves none behind.

Its sandbox makes only `/` private before it detaches the old root, so every other shared mount of the
host would be unmounted on the host too (the Docker engine's mounts of running containers among them:
the engine then sees an empty folder where a container's files are). It is therefore started in a mount
namespace of its own whose every mount is a slave of the host's: unmounts reach it, none leaves it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import shutil

from regatta_executor.local import subprocesses
from regatta_executor.local.command import HOST_PATH

SLIRP_NETWORK = ipaddress.ip_network("10.0.2.0/24")
DNS_SERVER = "10.0.2.3"
RESOLV_CONF = f"nameserver {DNS_SERVER}\n".encode()
_BLOCKED_RANGES = (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
    "192.0.0.0/24", "192.168.0.0/16", "224.0.0.0/4", "240.0.0.0/4",
)  # fmt: skip
_MTU = 65520


def tools() -> dict[str, str]:
    found = {name: shutil.which(name, path=HOST_PATH) for name in ("slirp4netns", "nsenter", "ip", "unshare")}
    missing = [name for name, path in found.items() if path is None]
    if missing:
        raise RuntimeError(f"public tasks in the local environment need {missing} on the host")
    return {name: path for name, path in found.items() if path is not None}


async def host_addresses(ip: str) -> list[ipaddress.IPv4Interface]:
    """Every IPv4 address of the host's interfaces with its network (read fresh per sandbox:
    bridges come and go)."""
    process = await asyncio.create_subprocess_exec(
        ip, "-j", "-4", "addr", "show",
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    out, _ = await process.communicate()
    if process.returncode != 0:
        raise RuntimeError("cannot list the host's addresses with `ip -j addr`")
    addresses = []
    for interface in json.loads(out or b"[]"):
        for info in interface.get("addr_info", []):
            with contextlib.suppress(ValueError, KeyError):
                addresses.append(ipaddress.IPv4Interface(f"{info['local']}/{info['prefixlen']}"))
    return addresses


def blocking_routes(host: list[ipaddress.IPv4Interface]) -> list[str]:
    """`ip -batch` lines for the sandbox's namespace; slirp4netns's /24 is more specific than
    10.0.0.0/8 and stays reachable; every host address and network is covered even if public."""
    networks: set[ipaddress.IPv4Network] = {ipaddress.IPv4Network(r) for r in _BLOCKED_RANGES}
    for interface in host:
        if interface.ip not in SLIRP_NETWORK:
            networks |= {interface.network, ipaddress.IPv4Network(interface.ip)}
    return [f"route add unreachable {network}" for network in sorted(networks)]


class SlirpNetwork:
    """The slirp4netns process of one sandbox."""

    def __init__(self) -> None:
        self._process: asyncio.subprocess.Process | None = None
        self._exit_w: int | None = None

    async def attach(self, pid: int, timeout_sec: float) -> None:
        """Give the network namespace of `pid` outbound access, once its routes are in place."""
        found = tools()
        ready_r, ready_w = os.pipe()
        exit_r, self._exit_w = os.pipe()
        os.set_inheritable(self._exit_w, False)
        try:
            self._process = await asyncio.create_subprocess_exec(
                found["unshare"], "--mount", "--propagation", "slave", "--",
                found["slirp4netns"], "--configure", f"--mtu={_MTU}", "--disable-host-loopback",
                "--enable-sandbox", "--enable-seccomp", f"--ready-fd={ready_w}", f"--exit-fd={exit_r}",
                "--", str(pid), "tap0",
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE, pass_fds=(ready_w, exit_r), start_new_session=True,
                cwd="/", env={"PATH": HOST_PATH},
            )  # fmt: skip
            os.close(ready_w)
            os.close(exit_r)
            ready_w = exit_r = -1
            ready = await asyncio.wait_for(subprocesses.read_until(ready_r, lambda d: b"1" in d), timeout_sec)
            if b"1" not in ready:
                raise RuntimeError(f"slirp4netns failed: {await self._stderr()}")
            routes = blocking_routes(await host_addresses(found["ip"]))
            await self._route(found, pid, routes, timeout_sec)
        finally:
            for fd in (ready_r, ready_w, exit_r):
                if fd >= 0:
                    os.close(fd)

    async def close(self) -> None:
        if self._exit_w is not None:
            os.close(self._exit_w)
            self._exit_w = None
        if self._process is not None:
            subprocesses.kill(self._process)
            await self._process.wait()
            self._process = None

    async def _route(self, found: dict[str, str], pid: int, routes: list[str], timeout_sec: float) -> None:
        process = await asyncio.create_subprocess_exec(
            found["nsenter"], "-t", str(pid), "-n", "--", found["ip"], "-batch", "-",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE, cwd="/", env={"PATH": HOST_PATH},
        )  # fmt: skip
        _, err = await asyncio.wait_for(process.communicate("\n".join(routes).encode() + b"\n"), timeout_sec)
        if process.returncode != 0:
            raise RuntimeError(f"cannot route the sandbox's network: {err.decode(errors='replace')}")

    async def _stderr(self) -> str:
        if self._process is None or self._process.stderr is None:
            return ""
        with contextlib.suppress(TimeoutError):
            return (await asyncio.wait_for(self._process.stderr.read(4096), 1)).decode(errors="replace")
        return ""
