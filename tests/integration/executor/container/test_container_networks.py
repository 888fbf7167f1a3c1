"""Networks as Harbor defines them, on a real engine: a `public` task resolves names through the
bridge's forwarder whatever the host's resolver is (here one on a private address the test makes),
its build too, and the forwarder answers nothing but the bridge."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import secrets
import signal
import socket
import subprocess
import time
from pathlib import Path

import docker
import pytest
from regatta_executor.container import janitor
from regatta_executor.container.network import allowlist, dns
from regatta_executor.container.network.bridge import (
    ensure_allowlist_network,
    ensure_sandbox_network,
    gateway_address,
)

from tests.integration.container_support import (
    BASE_IMAGE,
    build_log,
    host_addresses,
    rewards,
    run_trial,
    trial_dir,
    write_task,
)
from tests.integration.network_support import (
    DNS_QUERY_SCRIPT,
    dns_query,
    http_listener,
    own_sandbox_network,
    private_namespace,
    resolver_in,
)

pytestmark = [pytest.mark.timeout(600), pytest.mark.usefixtures("built_images_removed"), pytest.mark.serial]

MIRROR = "deb.debian.org"  # the base image's apt source (plain http)


async def test_a_public_task_builds_with_apt_and_resolves_through_a_private_resolver(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    mirror = socket.getaddrinfo(MIRROR, 80, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    # A name only the test's resolver knows: resolving it proves the path went through that resolver.
    marker, marker_ip = f"probe-{secrets.token_hex(4)}.regatta.test", f"192.0.2.{secrets.randbelow(200) + 10}"
    task = write_task(
        tmp_path / "tasks",
        "apt",
        network_mode="public",
        dockerfile=f"""
            FROM debian:bookworm-slim
            RUN getent hosts {marker} > /opt/built-resolved.txt
            RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends jq \\
                && rm -rf /var/lib/apt/lists/*
        """,
        solve="cp /opt/built-resolved.txt /logs/agent/ && jq -n '1+1' > /logs/agent/jq.txt",
        test=f"""
            getent hosts {marker} > /logs/verifier/resolved.txt
            getent hosts {MIRROR} >> /logs/verifier/resolved.txt
            if [ "$(jq -n '1+1')" = 2 ] && grep -q '^{marker_ip} ' /logs/verifier/resolved.txt \\
               && grep -q '^{mirror} ' /logs/verifier/resolved.txt; then echo 1; else echo 0; fi \\
              > /logs/verifier/reward.txt
        """,
    )
    with (
        private_namespace() as namespace,
        resolver_in(namespace, {marker: marker_ip, MIRROR: mirror}, tmp_path) as resolver,
        own_sandbox_network(engine) as names,
    ):
        assert dns_query(resolver, marker) == [marker_ip]  # the test's resolver answers the host
        result = await run_trial(task, "oracle", tmp_path, sandbox_dns_upstreams=[resolver], **names)
        assert rewards(result) == {"reward": 1.0}, (result.exception_info, build_log(tmp_path, result))
        trial = trial_dir(tmp_path, result)
        assert (trial / "agent" / "built-resolved.txt").read_text().split() == [marker_ip, marker]
        assert (trial / "agent" / "jq.txt").read_text().strip() == "2"

        # Never an open resolver: neither another machine routed to the gateway (the namespace) nor
        # the host itself gets an answer from the forwarder.
        gateway = str(gateway_address(engine, names["sandbox_network"]))
        namespace.run("ip", "route", "add", f"{gateway}/32", "via", namespace.host_address)
        assert namespace.run("python3", "-c", DNS_QUERY_SCRIPT, resolver, marker).stdout.strip() == "answered"
        assert namespace.run("python3", "-c", DNS_QUERY_SCRIPT, gateway, marker).stdout.strip() == "silent"
        assert dns_query(gateway, marker) is None

        # A forwarder that died is started again before the next attempt, and never a second one.
        killed = int(dns.pid_file(names["sandbox_bridge"]).read_text())
        os.kill(killed, signal.SIGKILL)
        while killed in _forwarders(names["sandbox_bridge"]):  # a zombie's command line is empty
            time.sleep(0.01)
        for _ in range(2):
            ensure_sandbox_network(engine, names["sandbox_network"], names["sandbox_bridge"], [resolver])
        assert len(_forwarders(names["sandbox_bridge"])) == 1
        assert killed not in _forwarders(names["sandbox_bridge"])
        resolved = engine.containers.run(
            BASE_IMAGE, ["getent", "hosts", marker], network=names["sandbox_network"], remove=True
        )
        assert resolved.decode().split() == [marker_ip, marker]


def _forwarders(bridge: str) -> list[int]:
    """Processes whose command line names the bridge's forwarder's pid file."""
    found = []
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if proc.name.isdigit() and f"--pid-file={dns.pid_file(bridge)}".encode() in (
                proc / "cmdline"
            ).read_bytes().split(b"\0"):
                found.append(int(proc.name))
    return found


PROBE = """
import socket, sys
port = int(sys.argv[1])
for target in sys.argv[2:]:
    try:
        address = socket.getaddrinfo(target, port, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    except OSError:
        print(target, "unresolved")
        continue
    try:
        socket.create_connection((address, port), timeout=2).close()
        print(target, address, "open")
    except OSError as exc:
        print(target, address, "blocked", type(exc).__name__)
"""


async def test_an_allowlist_task_reaches_its_allowed_hosts_and_nothing_else(
    engine: docker.DockerClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hosts the test makes on private addresses the operator allows (REGATTA_OUTBOUND_ALLOW), but
    for one: the task reaches the one it names and the one in its CIDR, and not the one it does not
    name, nor a private one the operator does not allow even through an allowed name, nor the
    public mirror; names it does not allow do not resolve."""
    tag = secrets.token_hex(3)
    allowed, other, rebind = (f"{kind}.{tag}.regatta.test" for kind in ("allowed", "other", "rebind"))
    mirror = socket.getaddrinfo(MIRROR, 80, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    with (
        private_namespace() as ns_a,
        private_namespace() as ns_b,
        private_namespace() as ns_c,
        private_namespace() as ns_d,
        http_listener(ns_a) as host_a,
        http_listener(ns_b) as host_b,
        http_listener(ns_c) as host_c,
        http_listener(ns_d) as host_d,
        resolver_in(ns_a, {allowed: host_a, other: host_b, rebind: host_c}, tmp_path) as resolver,
        own_sandbox_network(engine) as names,
        socket.create_server(("0.0.0.0", 0)) as host_server,  # a host service on every address
    ):
        host_port = host_server.getsockname()[1]
        subnet_d = str(ipaddress.ip_interface(f"{host_d}/30").network)
        monkeypatch.setenv("REGATTA_OUTBOUND_ALLOW", ",".join(f"{h}/32" for h in (host_a, host_b, host_d)))
        # The host itself (its veth ends to the namespaces included) and its allowlist gateway.
        on_host = [
            *host_addresses(),
            str(
                ensure_allowlist_network(engine, names["allowlist_network"], names["allowlist_bridge"], None)
            ),
        ]
        targets = [allowed, f"www.{allowed}", host_b, other, rebind, host_c, host_d, mirror]
        task = write_task(
            tmp_path / "tasks",
            "allowlist",
            network_mode="allowlist",
            environment=f"allowed_hosts = {json.dumps([allowed, rebind, subnet_d])}\n",
            solve=f"python3 -c '{PROBE}' 8080 {' '.join(targets)} > /logs/agent/probe.txt\n"
            f"python3 -c '{PROBE}' {host_port} {' '.join(on_host)} > /logs/agent/host.txt\n",
            test=f"""
                python3 -c '{PROBE}' 8080 {allowed} > /logs/verifier/probe.txt
                if grep -q ' open$' /logs/verifier/probe.txt; then echo 1; else echo 0; fi \\
                  > /logs/verifier/reward.txt
            """,
        )
        result = await run_trial(task, "oracle", tmp_path, sandbox_dns_upstreams=[resolver], **names)
        assert rewards(result) == {"reward": 1.0}, result.exception_info
        reached_host = (trial_dir(tmp_path, result) / "agent" / "host.txt").read_text().splitlines()
        assert len(reached_host) == len(on_host) and all(" blocked " in line for line in reached_host), (
            reached_host
        )
        lines = (trial_dir(tmp_path, result) / "agent" / "probe.txt").read_text().splitlines()
        assert lines == [
            f"{allowed} {host_a} open",
            f"www.{allowed} unresolved",  # an exact name admits no subdomain
            f"{host_b} {host_b} blocked TimeoutError",
            f"{other} unresolved",
            f"{rebind} {host_c} blocked TimeoutError",  # allowed name, private address not allowed
            f"{host_c} {host_c} blocked TimeoutError",
            f"{host_d} {host_d} open",  # in an allowed CIDR
            f"{mirror} {mirror} blocked TimeoutError",
        ], lines
        assert _attempt_leftovers(names["allowlist_bridge"]) == ([], [])


def _attempt_leftovers(bridge: str) -> tuple[list[str], list[str]]:
    """Rules matched on one container's address, and per-attempt sets, still on the host."""
    rules = subprocess.run(["iptables-save"], capture_output=True, text=True, check=True).stdout
    sets = subprocess.run(["ipset", "list", "-n"], capture_output=True, text=True, check=True).stdout
    leftover_rules = [line for line in rules.splitlines() if f"-i {bridge}" in line and " -s " in line]
    leftover_sets = [name for name in sets.split() if name.startswith("rgt-a-")]
    return leftover_rules, leftover_sets


def test_the_janitor_closes_the_allowlist_of_a_container_that_is_gone(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    """An executor killed mid-attempt leaves its allowlist's rules, set and resolver behind; the next
    executor's janitor removes them once the container is gone, and leaves a live one's alone."""
    with own_sandbox_network(engine) as names:
        network, bridge = names["allowlist_network"], names["allowlist_bridge"]
        gateway = ensure_allowlist_network(engine, network, bridge, None)
        states = []
        containers = [
            engine.containers.run(BASE_IMAGE, ["sleep", "60"], network=network, detach=True) for _ in range(2)
        ]
        try:
            for container in containers:
                container.reload()
                states.append(
                    allowlist.open_attempt(
                        bridge=bridge,
                        gateway=gateway,
                        container=container.name,
                        address=container.attrs["NetworkSettings"]["Networks"][network]["IPAddress"],
                        allowed_hosts=["example.org", "192.0.2.0/24"],
                        upstreams=dns.parse_upstreams(["192.0.2.53"]),
                    )
                )
            assert len(_attempt_leftovers(bridge)[0]) == 2 * 5
            containers[0].remove(force=True)
            janitor.sweep(engine, tmp_path / "owners")
            rules, sets = _attempt_leftovers(bridge)
            assert sets == [states[1].set_name]
            assert len(rules) == 5 and all(f"-s {states[1].address}/32" in rule for rule in rules)
            assert not states[0].state_file.exists() and dns.running_process(states[0].pid_file) is None
            assert dns.running_process(states[1].pid_file) is not None
        finally:
            for container in containers:
                with contextlib.suppress(docker.errors.NotFound):
                    container.remove(force=True)
            for state in states:
                allowlist.close_attempt(state)
    assert _attempt_leftovers(bridge) == ([], [])


@pytest.mark.parametrize(
    ("network_mode", "interfaces"), [("no-network", ["lo"]), ("allowlist", ["eth0", "lo"])]
)
async def test_build_steps_have_network_unless_the_task_has_none(
    engine: docker.DockerClient, tmp_path: Path, network_mode: str, interfaces: list[str]
) -> None:
    """A no-network task's image builds without network; an allowlist task's on the public bridge
    (Harbor builds it with network too; its allowlist holds for the agent and the verifier)."""
    task = write_task(
        tmp_path / "tasks",
        f"build-{network_mode}",
        network_mode=network_mode,
        dockerfile=f"FROM {BASE_IMAGE}\nRUN ls /sys/class/net > /opt/interfaces; echo {secrets.token_hex(4)}",
        solve="cp /opt/interfaces /logs/agent/interfaces.txt",
        test="echo 1 > /logs/verifier/reward.txt",
    )
    with own_sandbox_network(engine) as names:
        result = await run_trial(task, "oracle", tmp_path, **names)
    assert rewards(result) == {"reward": 1.0}, result.exception_info
    assert (trial_dir(tmp_path, result) / "agent" / "interfaces.txt").read_text().split() == interfaces
