"""A multi-host deployment on one machine: the bridge, the 3-server NATS cluster, the control plane
(relay, registry-sync, run-scheduler, scoring, gateway: `Stack` with no executor, on Postgres) in the
root namespace, and executor hosts (hosts.py) that share nothing with it or each other but the bus.

`teardown` leaves nothing behind whatever state a test left it in: processes, namespaces, veths, the
bridge, engines' data-roots, container cgroups, folders.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from regatta import nats_server, ownership
from regatta.stack import DEVELOPMENT_LOCAL_IMAGES, Stack

from .hosts import DATA_ROOT, RUN_ROOT, ExecutorHost, remove_cgroups, remove_run_folders
from .nats_cluster import NatsCluster
from .network import Network, free_subnet

# The operator's provisioning of a host: the images a task may name without a pull (REGATTA_LOCAL_IMAGES),
# saved from this machine's engine and loaded into each host's; task images are built on the host.
BASE_IMAGES = ("regatta-test-base:bookworm", *DEVELOPMENT_LOCAL_IMAGES.split(","))


@dataclass
class ControlPlane(Stack):
    """The embedded stack's services with no executor, on the cluster's NATS: each service as its own
    NATS user (all three servers' URLs), as the embedded server gives them."""

    cluster_nats: NatsCluster | None = None

    def service_nats_url(self, service: str) -> str:
        assert self.cluster_nats is not None
        return self.cluster_nats.urls(nats_server.user_for(service))


@dataclass
class Cluster:
    root: Path
    database_url: str
    name: str = field(default_factory=lambda: "rg" + secrets.token_hex(3))
    env: dict[str, str] = field(default_factory=dict)  # for every service, executors included
    network: Network | None = None
    nats: NatsCluster | None = None
    control: ControlPlane | None = None
    hosts: dict[int, ExecutorHost] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.root = self.root.resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        # One key for the gateway (seals run secrets) and every executor (opens them).
        self.env.setdefault("REGATTA_MASTER_KEY", secrets.token_urlsafe(32))
        self.env.setdefault("REGATTA_NATS_REPLICAS", "3")
        self.env.setdefault("REGATTA_LOCAL_IMAGES", DEVELOPMENT_LOCAL_IMAGES)
        self.env.setdefault("HARBOR_TELEMETRY", "0")

    @property
    def image_archive(self) -> Path:
        return self.root / "base-images.tar"

    def start(self, hosts: int = 2) -> None:
        sweep_stale()
        owner = RUN_ROOT / self.name / "owner"
        owner.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        owner.write_text(f"{os.getpid()} {ownership.start_time(os.getpid())}\n")
        try:
            self.network = Network(self.name, free_subnet())
            self.network.create()
            self.nats = NatsCluster(self.root / "nats", self.network.gateway_address)
            self.nats.start_all()
            self._save_base_images()
            for _ in range(hosts):
                self.add_host(wait=False)
            self.control = ControlPlane(
                data_dir=self.root / "control",
                port=nats_server.free_port(),
                port_is_picked=True,
                executors=0,
                nats_url=self.nats.urls("admin"),
                database_url=self.database_url,
                extra_env=dict(self.env),
                ready_timeout=240.0,
                cluster_nats=self.nats,
            )
            self.control.environment = "container"
            self.control.start()
            for host in self.hosts.values():
                host.wait_ready()
        except BaseException:
            self.teardown()
            raise

    def _save_base_images(self) -> None:
        if not self.image_archive.exists():
            part = self.image_archive.with_suffix(".part")
            subprocess.run(["docker", "save", "-o", str(part), "--", *BASE_IMAGES], check=True)
            part.rename(self.image_archive)

    def add_host(self, wait: bool = True) -> ExecutorHost:
        assert self.network is not None and self.nats is not None
        index = max(self.hosts, default=0) + 1
        host = ExecutorHost(
            index=index,
            cluster=self.name,
            state=self.root / "hosts" / str(index),
            network=self.network,
            executor_env={**self.env, "NATS_URL": self.nats.urls(nats_server.EXECUTOR_USER)},
            image_archives=[self.image_archive],
        )
        self.hosts[index] = host
        host.start()
        if wait:
            host.wait_ready()
        return host

    @property
    def url(self) -> str:
        assert self.control is not None
        return self.control.url

    @property
    def token(self) -> str:
        assert self.control is not None
        return self.control.token

    def teardown(self) -> None:
        # Hosts are killed whole: what runs in them ends with their namespaces (a graceful drain would only
        # hand their attempts back to a queue nobody will read).
        for host in self.hosts.values():
            with contextlib.suppress(Exception):
                host.remove()
        if self.control is not None:
            with contextlib.suppress(Exception):
                self.control.stop()
        if self.nats is not None:
            with contextlib.suppress(Exception):
                self.nats.stop()
        if self.network is not None:
            self.network.remove()
        remove_run_folders(self.name)
        shutil.rmtree(DATA_ROOT / self.name, ignore_errors=True)
        self.image_archive.unlink(missing_ok=True)


def sweep_stale() -> None:
    """What a cluster whose process was killed outright (no teardown ran) left behind: its processes
    ended with it (ownership.popen); its namespaces, veths, bridge, engines' data-roots and container
    cgroups are removed here, at the next start of any cluster."""
    for folder in RUN_ROOT.iterdir() if RUN_ROOT.exists() else ():
        try:
            pid, started = (folder / "owner").read_text().split()
        except (OSError, ValueError):
            continue
        if ownership.start_time(int(pid)) == started:
            continue  # its owner runs
        # The subnet is not needed to remove what carries the cluster's name.
        Network(folder.name, ipaddress.IPv4Network("10.231.0.0/24")).remove()
        for data_root in (DATA_ROOT / folder.name).glob("*"):
            remove_cgroups(data_root)
        shutil.rmtree(DATA_ROOT / folder.name, ignore_errors=True)
        remove_run_folders(folder.name)
