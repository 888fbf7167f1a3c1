"""Whether a Docker engine answers, through the docker SDK (DOCKER_HOST, DOCKER_TLS_VERIFY, …)."""

from __future__ import annotations

import docker
from docker.errors import DockerException
from requests.exceptions import RequestException


def engine_answers(timeout: float = 2.0) -> bool:
    """True when the engine the environment points at answers a ping within `timeout` seconds."""
    try:
        client = docker.from_env(timeout=timeout)
    except (DockerException, RequestException, OSError):
        return False
    try:
        return bool(client.ping())
    except (DockerException, RequestException, OSError):
        return False
    finally:
        client.close()
