"""The Docker engine this executor talks to: one shared client per process, and a cheap liveness check."""

from __future__ import annotations

import functools
import os
import socket

import docker
from docker.errors import DockerException
from docker.transport.unixconn import UnixHTTPAdapter
from requests.exceptions import RequestException

CONTAINER_ENVIRONMENT = "regatta_executor.container.environment:ContainerEnvironment"

# Labels on everything Regatta creates on an engine, so that it finds (and only removes) its own.
LABEL_MANAGED = "dev.regatta.managed"
LABEL_OWNER = "dev.regatta.owner"
LABEL_HOST = "dev.regatta.host"
LABEL_OWNERS = "dev.regatta.owners"
LABEL_SESSION = "dev.regatta.session"
LABEL_DIGEST = "dev.regatta.environment-digest"

_API_TIMEOUT_SEC = 120
# Every attempt holds a thread on a pooled connection while a command runs; the pool must not be the
# limit on concurrent attempts.
_POOL_SIZE = 64
# The scheme docker-py mounts its socket adapters on.
_SOCKET_SCHEME = "http+docker://"


class OnePoolAdapter(UnixHTTPAdapter):
    """The engine's socket with one connection pool. docker-py's adapter keys its pools by the whole
    URL, so nearly every call (each names a container or an exec) makes a pool of its own, opens a new
    connection and evicts another pool: a connection setup on both sides and two passes over a
    `_POOL_SIZE` queue per call, about a tenth of the executor's CPU per attempt. Every URL here is on
    the one socket, so one pool is right; a connection the engine took over for a stream (an exec's
    output) and then closed is seen as dropped when next taken, and replaced."""

    def get_connection(self, url: str, proxies: object = None) -> object:
        return super().get_connection(_SOCKET_SCHEME + "localhost", proxies)


@functools.cache
def client() -> docker.DockerClient:
    """The process's client, from DOCKER_HOST (default: the local socket)."""
    engine = docker.DockerClient.from_env(timeout=_API_TIMEOUT_SEC, max_pool_size=_POOL_SIZE)
    api = engine.api
    default = api.adapters.get(_SOCKET_SCHEME)
    if type(default) is UnixHTTPAdapter:
        adapter = OnePoolAdapter(
            f"http+unix://{default.socket_path}", timeout=_API_TIMEOUT_SEC, max_pool_size=_POOL_SIZE
        )
        api.mount(_SOCKET_SCHEME, adapter)
        api._custom_adapter = adapter  # docker-py's fallback for URLs no mount matches
        default.close()
        # No proxy and no .netrc applies to a local socket; requests would look both up on every call.
        api.trust_env = False
    return engine


def engine_answers(timeout_sec: float = 10.0, tries: int = 2) -> bool:
    """Whether a Docker engine answers a ping within `timeout_sec`, asked up to `tries` times (never
    raises). Generous: an engine busy building or starting containers can take seconds to answer, and
    `auto` decides from this once for the executor's life; an engine that is not there (no socket, a
    refused connection) fails at once however long the timeout."""
    for _ in range(max(tries, 1)):
        try:
            probe = docker.DockerClient.from_env(timeout=timeout_sec)
        except (DockerException, RequestException, OSError):
            continue
        try:
            if probe.ping():
                return True
        except (DockerException, RequestException, OSError, ValueError):
            pass
        finally:
            probe.close()
    return False


def host_name() -> str:
    """The name this executor's containers are labelled with; the janitor only sweeps its own host's."""
    return os.environ.get("REGATTA_EXECUTOR_HOST") or socket.gethostname()
