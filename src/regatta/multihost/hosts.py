"""One executor host: a network namespace on the bridge, a PID, mount and UTS namespace whose process 1
(host_init.py) runs the host's own Docker engine and its executor, and a state folder of its own.

The engine is configured as scripts/services.sh configures the machine's (userns-remap, overlay2),
with its own data-root, exec-root (its containerd runs under it), pidfile, socket and container
bridge subnet; its containers' cgroups are the only things it leaves in the root namespace when
killed, and `remove` takes those away too.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import docker

from regatta import ownership

from .network import Network

RUN_ROOT = Path("/run/regatta-hosts")
# Engines' data-roots: on a path every component of which others may traverse, which the remapped
# root of a container needs (a test's temporary folder is private to the machine's root).
DATA_ROOT = Path("/var/lib/regatta-hosts")
CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass
class ExecutorHost:
    index: int
    cluster: str  # the cluster's name: the host's folders, namespace and interfaces carry it
    state: Path  # the host's own disk: engine data-root, executor state, logs
    network: Network
    executor_env: dict[str, str]
    image_archives: list[Path]
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def run_dir(self) -> Path:
        return RUN_ROOT / self.cluster / str(self.index)

    @property
    def docker_socket(self) -> Path:
        return self.run_dir / "docker.sock"

    @property
    def data_root(self) -> Path:
        return DATA_ROOT / self.cluster / str(self.index)

    @property
    def name(self) -> str:
        return f"{self.cluster}-host-{self.index}"

    @property
    def ready_file(self) -> Path:
        return self.run_dir / "executor.pid"

    @property
    def owners_dir(self) -> Path:
        """The executor's janitor folder (container environment `state_dir`/owners)."""
        return self.state / "container-state" / "owners"

    def engine(self) -> docker.DockerClient:
        return docker.DockerClient(base_url=f"unix://{self.docker_socket}", timeout=30)

    def daemon_config(self) -> dict[str, object]:
        # The engine's container bridge: a subnet of its own per host, inside its own namespace.
        third = 100 + self.index
        return {
            "userns-remap": "default",
            "storage-driver": "overlay2",
            "log-level": "warn",
            "bip": f"10.232.{third}.1/24",
            "default-address-pools": [{"base": f"10.233.{third}.0/24", "size": 28}],
        }

    def start(self) -> None:
        """Namespace, engine, base images, executor (`wait_ready` waits for it). A host that ran before
        comes back as a rebooted machine: a fresh /run (its engine's and network's run files) and a fresh
        network namespace, the same disk (data-root, state folder)."""
        assert not self.alive(), f"{self.name} runs"
        shutil.rmtree(self.run_dir, ignore_errors=True)
        self.network.remove_host(self.index)
        for folder in (self.state, self.run_dir, self.state / "logs"):
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.data_root.mkdir(parents=True, exist_ok=True, mode=0o711)
        for folder in (DATA_ROOT, DATA_ROOT / self.cluster):
            folder.chmod(0o711)
        self.network.add_host(self.index)
        daemon_json = self.state / "daemon.json"
        daemon_json.write_text(json.dumps(self.daemon_config(), indent=2) + "\n")
        env = {
            **self.executor_env,
            "DOCKER_HOST": f"unix://{self.docker_socket}",
            "REGATTA_DATA_DIR": str(self.state / "executor"),
            "REGATTA_EXECUTOR_ENVIRONMENT": "container",
            # The sandbox bridge's lock and DNS forwarder's pid file: host-wide facts, so the host's
            # own (a shared /run would let one host take another's forwarder, in another namespace,
            # for its own).
            "REGATTA_NETWORK_RUN_DIR": str(self.run_dir / "network"),
            "REGATTA_EXECUTOR_ENVIRONMENT_KWARGS": json.dumps(
                {"state_dir": str(self.state / "container-state")}
            ),
        }
        config = {
            "hostname": self.name,
            "logs": str(self.state / "logs"),
            "docker_socket": str(self.docker_socket),
            "dockerd_args": [
                "--config-file", str(daemon_json),
                "--data-root", str(self.data_root),
                "--exec-root", str(self.run_dir / "exec"),
                "--pidfile", str(self.run_dir / "docker.pid"),
                "-H", f"unix://{self.docker_socket}",
            ],
            "image_archives": [str(path) for path in self.image_archives],
            "executor_env": env,
            "ready_file": str(self.ready_file),
        }  # fmt: skip
        config_path = self.state / "host.json"
        config_path.write_text(json.dumps(config, indent=2))
        config_path.chmod(0o600)
        netns = f"/run/netns/{self.network.netns(self.index)}"
        with (self.state / "logs" / "host.log").open("ab") as log:
            # Ends with this process: SIGKILL (`unshare --fork` ignores SIGTERM), whose --kill-child
            # takes the namespace, so a test killed outright leaves no host running.
            self.process = ownership.popen(
                ["nsenter", f"--net={netns}", "--",
                 "unshare", "--mount", "--pid", "--uts", "--fork", "--kill-child", "--mount-proc", "--",
                 sys.executable, "-m", "regatta.multihost.host_init", str(config_path)],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, death_signal=signal.SIGKILL,
            )  # fmt: skip

    def wait_ready(self, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready_file.exists():
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self.process.returncode}; see {self.state / 'logs'}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name} did not start its executor in {timeout:.0f} s")
            time.sleep(0.1)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """The machine lost: SIGKILL to `unshare`, whose --kill-child takes the namespace's process 1,
        and with it every process of the namespace (containers' namespaces are nested in it)."""
        if self.alive():
            assert self.process is not None
            self.process.kill()
            self.process.wait(timeout=30)

    def namespace_pids(self) -> list[int]:
        """Processes still in the host's PID namespace (none once it was killed)."""
        if self.process is None:
            return []
        try:
            ours = os.readlink(f"/proc/{self.process.pid}/ns/pid_for_children")
        except OSError:
            return []
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and int(entry.name) != self.process.pid:
                with contextlib.suppress(OSError):
                    if os.readlink(entry / "ns/pid") == ours:
                        found.append(int(entry.name))
        return found

    def container_ids(self) -> list[str]:
        """Every container the engine recorded (its data-root), whether or not the engine runs."""
        return [path.name for path in self.data_root.glob("*/containers/*") if path.is_dir()]

    def remove(self) -> None:
        """Nothing of the host left but its logs: its processes, its containers' cgroups, its namespace
        and veth, its engine's data-root and its state."""
        self.kill()
        remove_cgroups(self.data_root)
        self.network.remove_host(self.index)
        shutil.rmtree(self.run_dir, ignore_errors=True)
        shutil.rmtree(self.data_root, ignore_errors=True)
        # The logs stay (in the cluster's folder) for whoever looks into what happened.
        for path in self.state.iterdir() if self.state.exists() else ():
            if path.name != "logs":
                shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink()


def remove_cgroups(data_root: Path) -> None:
    """The cgroups of an engine's containers that the kernel keeps once their processes died with the
    host (cgroup v1: nobody else removes them)."""
    for path in data_root.glob("*/containers/*"):
        for cgroup in CGROUP_ROOT.glob(f"*/docker/{path.name}"):
            with contextlib.suppress(OSError):
                cgroup.rmdir()


def remove_run_folders(cluster: str) -> None:
    """The cluster's run folder, and the remapped copies of its path that dockerd 20.10 with
    userns-remap makes beside it for its containerd (`<cluster>.100000.100000/<N>.100000.100000/…`)."""
    for path in (RUN_ROOT / cluster, *RUN_ROOT.glob(f"{cluster}.*")):
        shutil.rmtree(path, ignore_errors=True)
