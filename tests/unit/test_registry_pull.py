"""The pure parts of the executor's own image pulls (registry_pull.py): which image of a multi-platform
index the engine would run, and the scheme a registry is spoken to in."""

from __future__ import annotations

import platform

import pytest
from regatta_executor.container.image.registry_pull import PullError, _platform_manifest, registry_base

AMD = "sha256:" + "a" * 64
ARM = "sha256:" + "b" * 64


def test_an_index_gives_the_linux_image_of_this_machines_architecture() -> None:
    index = {
        "manifests": [
            {"digest": "sha256:" + "c" * 64, "platform": {"os": "windows", "architecture": "amd64"}},
            {"digest": AMD, "platform": {"os": "linux", "architecture": "amd64"}},
            {"digest": ARM, "platform": {"os": "linux", "architecture": "arm64", "variant": "v8"}},
        ]
    }
    expected = {"x86_64": AMD, "aarch64": ARM}.get(platform.machine())
    if expected is None:
        pytest.fail(f"no expectation for {platform.machine()}")
    assert _platform_manifest(index) == expected


def test_an_index_without_this_platform_or_with_a_bad_digest_is_refused() -> None:
    with pytest.raises(PullError, match="no linux/"):
        _platform_manifest({"manifests": [{"digest": AMD, "platform": {"os": "windows"}}]})
    arch = {"x86_64": "amd64", "aarch64": "arm64"}[platform.machine()]
    bad = {"manifests": [{"digest": "../../etc", "platform": {"os": "linux", "architecture": arch}}]}
    with pytest.raises(PullError, match="unreadable manifest"):
        _platform_manifest(bad)


def test_only_a_loopback_registry_is_spoken_to_in_plain_http() -> None:
    assert registry_base(("127.0.0.1", 5000)) == "http://127.0.0.1:5000"
    assert registry_base(("localhost", 5000)) == "http://localhost:5000"
    assert registry_base(("::1", 5000)) == "http://[::1]:5000"
    assert registry_base(("ghcr.io", 443)) == "https://ghcr.io:443"
    assert registry_base(("10.0.0.5", 5000)) == "https://10.0.0.5:5000"
