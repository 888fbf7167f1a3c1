"""NATS_URL names one server or a cluster's servers: nats-py takes a single string as one URL (a
comma-separated string would be one broken URL), so a cluster's URLs reach it as a list."""

from __future__ import annotations

from regatta_shared.settings import Settings


def test_a_cluster_url_is_split_into_its_servers() -> None:
    settings = Settings(NATS_URL="nats://a:1@10.0.0.1:4222, nats://a:1@10.0.0.2:4222,,nats://10.0.0.3:4222")
    assert settings.nats_servers == [
        "nats://a:1@10.0.0.1:4222",
        "nats://a:1@10.0.0.2:4222",
        "nats://10.0.0.3:4222",
    ]


def test_one_server_stays_one() -> None:
    assert Settings(NATS_URL="nats://127.0.0.1:4222").nats_servers == ["nats://127.0.0.1:4222"]
