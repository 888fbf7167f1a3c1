"""The gateway's subkeys of the master key, one per purpose (see regatta_shared.security.sealing)."""

from __future__ import annotations

from dataclasses import dataclass

from regatta_shared.security.sealing import SEALED_SECRETS, derive_key, master_key
from regatta_shared.settings import Settings

SECRETS_AT_REST = "regatta/secrets-at-rest/v1"
DOWNLOAD_URLS = "regatta/download-urls/v1"


@dataclass(frozen=True)
class Keys:
    secrets_at_rest: bytes
    sealing: bytes
    url_signing: bytes


def load_keys(settings: Settings) -> Keys:
    master = master_key(settings)
    return Keys(
        secrets_at_rest=derive_key(master, SECRETS_AT_REST),
        sealing=derive_key(master, SEALED_SECRETS),
        url_signing=derive_key(master, DOWNLOAD_URLS),
    )
