"""Process 1 of an executor host's PID namespace: its Docker engine, the operator's base images loaded
into it, then its executor; a SIGTERM drains the executor, then stops the engine. Killing this process
(SIGKILL from outside) ends every process of the namespace at once: executor, dockerd, containerd,
shims and every container, which is what losing the machine does.

Run as `python -m regatta.multihost.host_init CONFIG.json` by `hosts.ExecutorHost` inside the host's
namespaces; the config is written by the cluster, never by a user.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import docker

ENGINE_START_SEC = 120.0


def _engine_answers(sock: str) -> bool:
    try:
        client = docker.DockerClient(base_url=f"unix://{sock}", timeout=2)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


def _spawn(args: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)


def boot(config: dict[str, Any]) -> int:
    socket.sethostname(config["hostname"])
    logs = Path(config["logs"])
    sock = config["docker_socket"]
    dockerd = _spawn(["dockerd", *config["dockerd_args"]], logs / "dockerd.log")
    deadline = time.monotonic() + ENGINE_START_SEC
    while not _engine_answers(sock):
        if dockerd.poll() is not None or time.monotonic() > deadline:
            print(f"host_init: dockerd did not answer on {sock}", file=sys.stderr)
            return 1
        time.sleep(0.1)
    for archive in config["image_archives"]:
        subprocess.run(["docker", "-H", f"unix://{sock}", "load", "-q", "-i", archive], check=True)
    env = {**os.environ, **config["executor_env"]}
    command = [sys.executable, "-m", "regatta_executor"]
    executor = _spawn(command, logs / "executor.log", env)
    Path(config["ready_file"]).write_text(str(executor.pid))
    stopping = False

    def on_term(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        if executor.poll() is None:
            executor.terminate()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    while True:
        # As process 1 this reaps every orphan of the namespace, not only its own children.
        try:
            pid, _status = os.wait()
        except ChildProcessError:
            return 0
        except InterruptedError:
            continue
        if pid == executor.pid:
            executor.returncode = 0
            if not stopping:
                # As a host's service manager would: an executor that died is started again.
                executor = _spawn(command, logs / "executor.log", env)
                Path(config["ready_file"]).write_text(str(executor.pid))
                continue
            dockerd.terminate()
        elif pid == dockerd.pid:
            dockerd.returncode = 0
            if stopping:
                return 0


def main() -> None:
    config = json.loads(Path(sys.argv[1]).read_text())
    raise SystemExit(boot(config))


if __name__ == "__main__":
    main()
