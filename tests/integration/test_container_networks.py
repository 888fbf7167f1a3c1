"""Networks as Harbor defines them, on a real engine: a `public` task resolves names through the
bridge's forwarder whatever the host's resolver is (here one on a private address the test makes),
its build too, and the forwarder answers nothing but the bridge."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import time
from pathlib import Path

import docker
import pytest
from regatta_executor.container import dns
from regatta_executor.container.network import ensure_sandbox_network, gateway_address

from tests.integration.container_support import (
    BASE_IMAGE,
    build_log,
    rewards,
    run_trial,
    trial_dir,
    write_task,
)
from tests.integration.network_support import (
    DNS_QUERY_SCRIPT,
    dns_query,
    own_sandbox_network,
    private_namespace,
    resolver_in,
)

pytestmark = [pytest.mark.timeout(600), pytest.mark.usefixtures("built_images_removed")]

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
