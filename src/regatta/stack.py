"""The embedded stack: one nats-server, the SQLite store, every service as its own process.

A supervisor restarts a service that dies, so the stack behaves like a deployment: state lives in
the event store and JetStream, never in a process. The stack holds its data folder while it runs, and
what it starts ends with it however it ends (ownership.py).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import nats_server, ownership
from .launcher import Launcher, ServiceProcess
from .services import BY_NAME, CHOOSE_ENVIRONMENT_MODULE, NAMES

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# Local images the embedded stack's executors may use without a pull (scripts/test-image.sh makes them).
DEVELOPMENT_LOCAL_IMAGES = "debian:bookworm-slim,debian:bookworm,debian:12-slim,debian:12"
# How long a stop waits for a service after SIGTERM before it kills it; executors get their grace
# (REGATTA_EXECUTOR_GRACE_SEC) plus this, to cancel what is left and remove its sandboxes.
SERVICE_STOP_SEC = 10.0
EXECUTOR_CLEANUP_SEC = 20.0


def ensure_token(data_dir: Path) -> str:
    if os.environ.get("REGATTA_BOOTSTRAP_TOKEN"):
        return os.environ["REGATTA_BOOTSTRAP_TOKEN"]
    path = data_dir / "token"
    if path.exists():
        return path.read_text().strip()
    data_dir.mkdir(parents=True, exist_ok=True)
    token = "rg_" + secrets.token_urlsafe(24)
    path.write_text(token)
    path.chmod(0o600)
    return token


@dataclass
class Stack:
    data_dir: Path
    port: int = 8000
    executors: int = 2
    nats_url: str | None = None
    database_url: str | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    processes: dict[str, ServiceProcess] = field(default_factory=dict)
    # Forks the services (zygote.py): started with the first service, stopped after the last.
    launcher: Launcher | None = field(default=None, repr=False)
    health_ports: dict[str, int] = field(default_factory=dict)
    nats: nats_server.NatsServer | None = None
    environment: str = ""  # the environment every executor runs attempts in, chosen at start
    environment_reason: str = ""
    # Told what start-up is doing and waiting for (`regatta up` prints it: a start under load takes a while).
    say: Callable[[str], None] = field(default=lambda _message: None, repr=False)
    # How long start-up waits for the gateway to answer: a start on a loaded machine takes longer.
    ready_timeout: float = 60.0
    # The gateway's port was picked free by the caller (tests), so another may be picked if it is taken.
    port_is_picked: bool = False
    log_offsets: dict[str, int] = field(default_factory=dict, repr=False)
    # The data folder's lock, held from start to stop and passed to every process the stack starts.
    lock: ownership.DataLock | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.data_dir = self.data_dir.resolve()
        self.logs = self.data_dir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.token = ensure_token(self.data_dir)
        # Each service connects to the embedded nats-server as its own user (nats_server.USERS).
        self.nats_passwords = nats_server.ensure_credentials(self.data_dir)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "NATS_URL": self.nats_url or "",
                "REGATTA_DATA_DIR": str(self.data_dir),
                "REGATTA_BOOTSTRAP_TOKEN": self.token,
                "REGATTA_GATEWAY_PORT": str(self.port),
                "HARBOR_TELEMETRY": "0",
            }
        )
        if self.database_url:
            env["DATABASE_URL"] = self.database_url
        if (EXAMPLES / "registry.json").exists() and "REGATTA_HOSTED_BENCHMARKS" not in os.environ:
            env["REGATTA_HOSTED_BENCHMARKS"] = json.dumps(
                [
                    {
                        "registry_path": str(EXAMPLES / "registry.json"),
                        "dataset": "regatta-examples@1.0",
                        "name": "regatta-examples",
                    }
                ]
            )
        if "REGATTA_SOURCE_ROOTS" not in os.environ:
            # The embedded stack's members may add the repository's examples as folders.
            env["REGATTA_SOURCE_ROOTS"] = str(EXAMPLES)
        if "REGATTA_LOCAL_IMAGES" not in os.environ:
            # The examples' and tests' base image, which a development machine makes locally.
            env["REGATTA_LOCAL_IMAGES"] = DEVELOPMENT_LOCAL_IMAGES
        env.update(self.extra_env)
        if self.environment:
            env["REGATTA_EXECUTOR_ENVIRONMENT"] = self.environment
        return env

    def choose_environment(self) -> None:
        """`auto` decided once for every executor of the stack (so restarts agree), with the environment
        they get (DOCKER_HOST, …); a name that runs nothing stops `regatta up` before any service starts."""
        env = self.env()
        env.setdefault("REGATTA_EXECUTOR_ENVIRONMENT", "auto")
        if env["REGATTA_EXECUTOR_ENVIRONMENT"].strip() == "local":
            # Nothing to ask an engine: spare the chooser's interpreter (its imports cost seconds of a
            # loaded machine at every start).
            self.environment, self.environment_reason = "local", "as configured"
            return
        chooser = ownership.popen(
            [sys.executable, "-m", CHOOSE_ENVIRONMENT_MODULE],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            stdout, stderr = chooser.communicate(timeout=120)
        finally:
            if chooser.poll() is None:
                chooser.kill()
                chooser.wait()
        if chooser.returncode != 0:
            raise SystemExit(
                stderr.strip() or f"choosing the executors' environment failed ({chooser.returncode})"
            )
        chosen = json.loads(stdout)
        self.environment = chosen["kind"]
        self.environment_reason = chosen["reason"]

    def take_data_dir(self) -> None:
        """Hold the data folder (once): DataDirInUse if a stack runs on it; what a stack that died
        left running there is waited for, as long as its services may take to stop."""
        if self.lock is None:
            wait = self.executor_grace() + EXECUTOR_CLEANUP_SEC + SERVICE_STOP_SEC
            self.lock = ownership.DataLock.take(self.data_dir, wait, self.say)

    def _spawn(self, args: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        """A process of the stack's: it ends with the stack and holds its data folder while it runs."""
        assert self.lock is not None, "the data folder is taken first"
        return ownership.popen(args, keep_fds=(self.lock.fd,), **kwargs)

    def start_nats(self) -> None:
        if self.nats_url and self.nats is None:
            return
        self.take_data_dir()
        assert self.lock is not None
        port = int(self.nats_url.rsplit(":", 1)[1]) if self.nats_url else None
        port = port or int(os.environ.get("REGATTA_NATS_PORT") or nats_server.free_port())
        self.nats = nats_server.start(
            self.data_dir / "nats",
            port,
            self.logs / "nats-server.log",
            self.nats_passwords,
            spawn=self._spawn,
        )
        self.nats_url = self.nats.url("admin")
        self.lock.record("nats-server", self.nats.process.pid)

    def service_nats_url(self, service: str) -> str:
        """The embedded server's URL with the service's own user; a given NATS_URL as it is."""
        if self.nats is None:
            return self.nats_url or ""
        return self.nats.url(nats_server.user_for(service))

    def kill_nats(self) -> None:
        """SIGKILL the embedded nats-server (its JetStream data stays on disk)."""
        assert self.nats is not None, "only the embedded nats-server can be killed"
        self.nats.kill()
        self.nats.wait(timeout=30)

    def start(self) -> None:
        try:
            self.take_data_dir()
            if not self.environment:
                self.say("Choosing the executors' environment (is a Docker engine answering?)…")
                self.choose_environment()
            if not self.nats_url or self.nats is not None:
                self.say("Starting nats-server…")
            self.start_nats()
            self.say(f"Starting {', '.join(NAMES).replace('executor', f'{self.executors} executor(s)')}…")
            for name in NAMES:
                if name == "executor":
                    for index in range(self.executors):
                        self.start_service("executor", f"executor-{index + 1}")
                else:
                    self.start_service(name)
            self.wait_ready()
        except BaseException:
            self.stop()
            raise

    def start_service(
        self, service: str, key: str | None = None, env: dict[str, str] | None = None
    ) -> ServiceProcess:
        """`env`: settings of this process only (an executor host declared smaller than the others)."""
        key = key or service
        log = self.logs / f"{key}.log"
        self.log_offsets[key] = log.stat().st_size if log.exists() else 0
        base = self.env()
        env = {**base, **(env or {}), "NATS_URL": self.service_nats_url(service)}
        if BY_NAME[service].health_port:
            self.health_ports.setdefault(key, nats_server.free_port())
            env["REGATTA_HEALTH_PORT"] = str(self.health_ports[key])
        self.take_data_dir()
        assert self.lock is not None
        if self.launcher is None or not self.launcher.alive():
            self.launcher = Launcher(base, self.logs / "launcher.log", keep_fds=(self.lock.fd,))
            self.lock.record("launcher", self.launcher.process.pid)
        process = self.launcher.spawn(key, BY_NAME[service].main_module, env, log)
        self.processes[key] = process
        self.lock.record(key, process.pid)
        return process

    def kill(self, key: str, sig: int = signal.SIGKILL) -> None:
        process = self.processes[key]
        os.killpg(process.pid, sig)
        process.wait(timeout=30)

    def restart(self, key: str) -> None:
        service = "executor" if key.startswith("executor") else key
        self.start_service(service, key)

    def wait_ready(self, timeout: float | None = None) -> None:
        import httpx

        timeout = self.ready_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        repicks = 0
        self.say(f"Waiting for the gateway to answer at {self.url}/health (up to {timeout:.0f} s)…")
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/health", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            for key, process in list(self.processes.items()):
                if process.poll() is not None:
                    if self.lost_its_port(key) and repicks < 3:
                        repicks += 1
                        self.restart(key)
                        continue
                    log = self.logs / f"{key}.log"
                    raise RuntimeError(f"{key} exited with {process.returncode}; see {log}")
            time.sleep(0.1)
        raise TimeoutError("the gateway did not become healthy")

    def lost_its_port(self, key: str) -> bool:
        """A port picked free is only reserved until the service binds it, seconds later on a loaded
        machine; an outgoing connection may take it meanwhile. Such a port is picked again (True)."""
        log = self.logs / f"{key}.log"
        with log.open("rb") as handle:
            handle.seek(self.log_offsets.get(key, 0))
            if b"address already in use" not in handle.read():
                return False
        if key in self.health_ports:
            self.health_ports[key] = nats_server.free_port()
            return True
        if key == "gateway" and self.port_is_picked:
            self.port = nats_server.free_port()
            return True
        return False

    def supervise(self) -> None:
        """Restart any service that dies until interrupted."""
        while True:
            for key, process in list(self.processes.items()):
                if process.poll() is not None:
                    self.restart(key)
            time.sleep(0.5)

    def executor_grace(self) -> float:
        """The executors' REGATTA_EXECUTOR_GRACE_SEC (settings.py's default when unset)."""
        from regatta_shared.settings import Settings

        value = self.env().get("REGATTA_EXECUTOR_GRACE_SEC")
        default = Settings.model_fields["executor_grace_sec"].default
        try:
            return max(0.0, float(value)) if value else default
        except ValueError:
            return default

    def stop(self) -> None:
        """SIGTERM every service at once; NATS stops last, after all of them. Executors get their
        grace plus time to clean their sandboxes (running attempts finish or go back to JOBS
        unreported), the others 10 s; whatever is still alive then is killed."""
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        try:
            self._wait_stopped(self.executor_grace())
        except KeyboardInterrupt:
            # A second Ctrl-C: a second SIGTERM makes executors abandon their attempts now (they run
            # again at the next start), leaving only the time to remove their sandboxes.
            for process in self.processes.values():
                if process.poll() is None:
                    os.killpg(process.pid, signal.SIGTERM)
            self._wait_stopped(0.0)

    def _wait_stopped(self, grace: float) -> None:
        started = time.monotonic()
        for key, process in self.processes.items():
            allowed = grace + EXECUTOR_CLEANUP_SEC if key.startswith("executor") else SERVICE_STOP_SEC
            try:
                process.wait(timeout=max(0.0, allowed - (time.monotonic() - started)))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)
        if self.launcher is not None:
            self.launcher.close()
            self.launcher = None
        if self.nats is not None:
            self.nats.terminate()
            self.nats.wait(timeout=10)
        if self.lock is not None:
            self.lock.release()
            self.lock = None
