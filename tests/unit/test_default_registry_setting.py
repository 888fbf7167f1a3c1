"""REGATTA_DEFAULT_REGISTRY defaults to Harbor's own default registry, so a bare name means what it means to
`harbor run -d NAME@VERSION`; the pinned Harbor is the reference."""

from __future__ import annotations

from harbor.constants import DEFAULT_REGISTRY_URL
from regatta_shared.settings import HARBOR_DEFAULT_REGISTRY_URL, Settings


def test_the_default_registry_is_harbors() -> None:
    assert HARBOR_DEFAULT_REGISTRY_URL == DEFAULT_REGISTRY_URL
    assert Settings.model_fields["default_registry"].default == DEFAULT_REGISTRY_URL
