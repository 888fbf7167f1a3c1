"""What Regatta's own sandboxes (`local` and `container`) tell Harbor they can do."""

from __future__ import annotations

from harbor.environments.capabilities import EnvironmentCapabilities


def sandbox_capabilities(*, mounted: bool) -> EnvironmentCapabilities:
    """Both accept a network allowlist in every form Harbor offers, and a task never gets more network
    than it asked for: `container` opens exactly the allowed hosts (container/network/allowlist.py), `local`
    enforces an allowlist the strictest way (no network at all).

    `mounted` tells the two apart: `local` bind-mounts the trial's folders and runs no sidecar;
    `container` copies files in and out, runs a compose task's sidecars and serves Harbor's per-service
    operations on them (exec, downloads, stop), which `[[artifacts]]` and `[[verifier.collect]]` of a
    sidecar need: Harbor's `docker_compose` capability. The traits each class declares
    (`runs_compose`) must agree (tests/unit/test_environment_traits.py)."""
    return EnvironmentCapabilities(
        mounted=mounted,
        docker_compose=not mounted,
        disable_internet=True,
        network_allowlist=True,
        network_allowlist_hostnames=True,
        network_allowlist_wildcard_hostnames=True,
        network_allowlist_ipv4_addresses=True,
        network_allowlist_ipv6_addresses=True,
        network_allowlist_ipv4_cidrs=True,
        network_allowlist_ipv6_cidrs=True,
    )
