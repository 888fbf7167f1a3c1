"""docker-compose.yaml tasks in the `container` environment on a real Docker engine: a sidecar behind a
healthcheck that main waits for and reaches by its service name, main built from the task's root as
real tasks do, and a refused key failing the attempt before anything is made on the engine. Nothing of
an attempt (container, network, volume, firewall rule) is left afterwards."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import docker
import pytest
import yaml
from harbor.environments.base import ServiceOperationsUnsupportedError
from harbor.models.trial.result import TrialResult
from regatta_executor.container import janitor
from regatta_executor.container.compose import sidecars as compose_run
from regatta_executor.container.compose.sidecars import BRIDGE_PREFIX, bridge_name
from regatta_executor.container.engine import LABEL_SESSION
from regatta_executor.container.network import dns

from tests.integration.container_support import (
    BASE_IMAGE,
    build_log,
    containers_of,
    exception_type,
    host_addresses,
    rewards,
    run_trial,
    started_environment,
    trial_dir,
    write_task,
)

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("built_images_removed"), pytest.mark.serial]


def _leftovers(engine: docker.DockerClient, result: TrialResult) -> dict[str, list[str]]:
    """Every container, network and volume labelled with the trial's session, and firewall rules of
    attempt bridges."""

    def of_trial(objects: list[object]) -> list[str]:
        return [
            str(item.name)  # type: ignore[attr-defined]
            for item in objects
            if (item.attrs.get("Labels") or {}).get(LABEL_SESSION, "").startswith(result.trial_name)  # type: ignore[attr-defined]
        ]

    iptables = shutil.which("iptables")
    listed = "".join(
        subprocess.run([iptables, "-w", "-t", table, "-S"], capture_output=True, text=True).stdout
        for table in ("filter", "nat")
        if iptables
    )
    # A public attempt network's DNS forwarder (dns.py) leaves a pid file while it runs.
    forwarders = sorted(path.name for path in dns.RUN_DIR.glob(f"dns-{BRIDGE_PREFIX}*.pid"))
    return {
        "containers": containers_of(engine, result.trial_name),
        "networks": of_trial(engine.networks.list(filters={"label": LABEL_SESSION})),
        "volumes": of_trial(engine.volumes.list(filters={"label": LABEL_SESSION})),
        "rules": [line for line in listed.splitlines() if f" {BRIDGE_PREFIX}" in line] + forwarders,
    }


# Prints what the `web` service serves, or fails (one try, no retry).
FETCH = (
    'python3 -c "import urllib.request as r; '
    "print(r.urlopen('http://web:8000/answer.txt', timeout=5).read().decode().strip())\""
)
WEB = {
    "build": "./web",
    "command": [
        "sh",
        "-c",
        "echo 'web was here' > /shared/from-web; sleep 4; "
        "exec python3 -m http.server 8000 --directory /srv/www",
    ],
    "volumes": ["shared:/shared"],
    "expose": ["8000"],
    "healthcheck": {
        "test": [
            "CMD",
            "python3",
            "-c",
            "import urllib.request as r; r.urlopen('http://localhost:8000/answer.txt', timeout=2)",
        ],
        "interval": "1s",
        "timeout": "3s",
        "retries": 30,
    },
}


def _sidecar_task(parent: Path, name: str) -> Path:
    """A public task whose answer is only in the `web` sidecar's image, served over HTTP once the
    sidecar has slept (so main must wait for its healthcheck), plus a file it leaves in a named volume."""
    secret = secrets.token_hex(8)
    task = write_task(
        parent,
        name,
        network_mode="public",
        solve=f"{FETCH} > /app/answer.txt\n",
        test=f"""
            served=$({FETCH})
            if [ "$(cat /app/answer.txt)" = "{secret}" ] && [ "$served" = "{secret}" ] \\
               && [ "$(cat /shared/from-web)" = "web was here" ]; then echo 1; else echo 0; fi \\
               > /logs/verifier/reward.txt
        """,
    )
    web = task / "environment" / "web"
    web.mkdir()
    (web / "Dockerfile").write_text(
        f"FROM {BASE_IMAGE}\nRUN mkdir -p /srv/www && echo {secret} > /srv/www/answer.txt\n"
    )
    compose = {
        "services": {
            "main": {
                "volumes": ["shared:/shared"],
                "depends_on": {"web": {"condition": "service_healthy"}},
            },
            "web": WEB,
        },
        "volumes": {"shared": None},
    }
    (task / "environment" / "docker-compose.yaml").write_text(yaml.safe_dump(compose))
    return task


async def test_a_sidecar_behind_a_healthcheck_is_reached_by_name(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    task = _sidecar_task(tmp_path / "tasks", "sidecar")
    oracle = await run_trial(task, "oracle", tmp_path / "oracle")
    assert rewards(oracle) == {"reward": 1.0}, oracle.exception_info
    assert _leftovers(engine, oracle) == {"containers": [], "networks": [], "volumes": [], "rules": []}
    nop = await run_trial(task, "nop", tmp_path / "nop")
    assert rewards(nop) == {"reward": 0.0}, nop.exception_info
    assert _leftovers(engine, nop) == {"containers": [], "networks": [], "volumes": [], "rules": []}


async def test_main_built_from_the_task_root(engine: docker.DockerClient, tmp_path: Path) -> None:
    """As real tasks do: `build: {context: .., dockerfile: environment/Dockerfile}`; the Dockerfile
    copies a file from outside environment/, and main gets the compose file's environment,
    working_dir (interpolated from the task's env) and entrypoint (given Harbor's command)."""
    task = write_task(
        tmp_path / "tasks",
        "rooted",
        solve='printf "%s|%s|%s|%s\\n" "$(cat /opt/shared.txt)" "$FROM_COMPOSE" "$(pwd)" "$(cat /tmp/entry)"'
        " > /logs/agent/seen.txt",
        test="""
            expected="from the task root|task value|/srv/work|entry ran with sh -c sleep infinity"
            if [ "$(cat /logs/agent/seen.txt)" = "$expected" ]; then echo 1; else echo 0; fi \\
              > /logs/verifier/reward.txt
        """,
        dockerfile=f"FROM {BASE_IMAGE}\nCOPY shared/shared.txt /opt/shared.txt\n"
        f"RUN echo {secrets.token_hex(8)} > /opt/unique\n",
        environment='[environment.env]\nTASK_VALUE = "task value"\n',
    )
    (task / "shared").mkdir()
    (task / "shared" / "shared.txt").write_text("from the task root\n")
    (task / "environment" / "docker-compose.yaml").write_text(
        textwrap.dedent(
            """
            services:
              main:
                build:
                  context: ..
                  dockerfile: environment/Dockerfile
                environment:
                  FROM_COMPOSE: "${TASK_VALUE:-not interpolated}"
                working_dir: /srv/work
                entrypoint: ["/bin/sh", "-c", 'echo "entry ran with $*" > /tmp/entry; exec "$@"', "entry"]
            """
        )
    )
    result = await run_trial(task, "oracle", tmp_path)
    assert rewards(result) == {"reward": 1.0}, result.exception_info
    assert _leftovers(engine, result) == {"containers": [], "networks": [], "volumes": [], "rules": []}


async def test_main_built_from_an_absolute_dockerfile_in_the_task_root(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    """As 3 of 24 real compose tasks write it: `context: ${CONTEXT_DIR}/..` and `dockerfile:
    ${CONTEXT_DIR}/Dockerfile`, absolute once Harbor's CONTEXT_DIR is filled in. The image really is
    built from that Dockerfile (its RUN and a COPY from outside environment/), and the oracle passes."""
    marker = secrets.token_hex(8)
    task = write_task(
        tmp_path / "tasks",
        "absolute-dockerfile",
        solve="cp /opt/marker /logs/agent/seen.txt",
        test=f"""
            if [ "$(cat /logs/agent/seen.txt)" = "{marker}" ] \\
               && [ "$(cat /opt/shared.txt)" = "from the root" ]
            then echo 1; else echo 0; fi > /logs/verifier/reward.txt
        """,
        dockerfile=f"FROM {BASE_IMAGE}\nCOPY shared/shared.txt /opt/shared.txt\n"
        f"RUN echo {marker} > /opt/marker\n",
    )
    (task / "shared").mkdir()
    (task / "shared" / "shared.txt").write_text("from the root\n")
    (task / "environment" / "docker-compose.yaml").write_text(
        "services:\n  main:\n    build:\n      context: ${CONTEXT_DIR}/..\n"
        "      dockerfile: ${CONTEXT_DIR}/Dockerfile\n"
    )
    result = await run_trial(task, "oracle", tmp_path)
    assert rewards(result) == {"reward": 1.0}, result.exception_info
    assert "building regatta-env:" in build_log(
        tmp_path, result
    ) and "from environment/Dockerfile" in build_log(tmp_path, result)
    assert _leftovers(engine, result) == {"containers": [], "networks": [], "volumes": [], "rules": []}


@pytest.mark.parametrize("attack", ["host-file", "dot-dot", "linked-file", "linked-folder"])
async def test_a_dockerfile_out_of_the_context_is_refused_before_anything_is_built(
    engine: docker.DockerClient, tmp_path: Path, attack: str
) -> None:
    """A task naming, as its Dockerfile, a file of the executor's host outside the build context:
    directly (an absolute path), by `..` after ${CONTEXT_DIR}, or through a link in its environment/
    (the file, or a folder on its path). The host's file is a Dockerfile that would build (its LABEL
    would mark the image): the attempt is refused naming where the path leads, and nothing is built or
    made on the engine."""
    label = f"dev.regatta.test.host-dockerfile={secrets.token_hex(8)}"
    outside = tmp_path / "host"
    outside.mkdir()
    (outside / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nLABEL {label}\n")
    name = f"hostile-{attack}-{secrets.token_hex(4)}"
    task = write_task(tmp_path / "tasks", name)
    environment = task / "environment"
    named = {
        "host-file": str(outside / "Dockerfile"),
        "dot-dot": "${CONTEXT_DIR}/../../../host/Dockerfile",
        "linked-file": "${CONTEXT_DIR}/Dockerfile.linked",
        "linked-folder": "${CONTEXT_DIR}/linked/Dockerfile",
    }[attack]
    if attack == "linked-file":
        (environment / "Dockerfile.linked").symlink_to(outside / "Dockerfile")
    if attack == "linked-folder":
        (environment / "linked").symlink_to(outside)
    (environment / "docker-compose.yaml").write_text(
        f"services:\n  main:\n    build:\n      context: ${{CONTEXT_DIR}}/..\n      dockerfile: {named}\n"
    )
    said = (
        f"environment/docker-compose.yaml: services.main.build.dockerfile "
        f"{named.replace('${CONTEXT_DIR}', str(environment.resolve()))!r} resolves to "
        f"{(outside / 'Dockerfile').resolve()}, outside the build context {task.resolve()}"
    )
    try:
        result = await run_trial(task, "oracle", tmp_path)
    except ValueError as exc:
        assert said in str(exc)
    else:
        assert result.exception_info is not None, "the attempt ran"
        assert said in result.exception_info.exception_message, result.exception_info
        assert exception_type(result) in ("ValueError", "ComposeError"), result.exception_info
        assert build_log(tmp_path, result) == "", "a build was started"
    assert engine.images.list(filters={"label": label}) == []
    assert containers_of(engine, name) == []
    for kind in (engine.networks, engine.volumes):
        labelled = kind.list(filters={"label": LABEL_SESSION})
        assert not [item for item in labelled if item.attrs["Labels"][LABEL_SESSION].startswith(name)]


REFUSED_KEYS = [
    ("privileged: true", "services.db.privileged is not supported"),
    ("env_file: [/etc/passwd]", "services.db.env_file is not supported"),
    ("deploy: {resources: {limits: {memory: 1t}}}", "services.db.deploy is not supported"),
    ("networks: [backend]", "services.db.networks: only the default network is supported"),
]


@pytest.mark.parametrize(("line", "key"), REFUSED_KEYS, ids=[line.split(":")[0] for line, _ in REFUSED_KEYS])
async def test_a_refused_key_fails_before_any_container_is_made(
    engine: docker.DockerClient, tmp_path: Path, line: str, key: str
) -> None:
    name = f"refused-{secrets.token_hex(4)}"
    task = write_task(tmp_path / "tasks", name)
    (task / "environment" / "docker-compose.yaml").write_text(
        f"services:\n  db:\n    image: {BASE_IMAGE}\n    {line}\n"
    )
    said = f"environment/docker-compose.yaml: {key}"
    try:
        result = await run_trial(task, "oracle", tmp_path)
    except ValueError as exc:
        assert said in str(exc)
    else:
        assert result.exception_info is not None, "the attempt ran"
        assert said in result.exception_info.exception_message, result.exception_info
        assert exception_type(result) in ("ValueError", "ComposeError"), result.exception_info
    # Nothing of the attempt was made: no container, network or volume labelled with its session.
    assert containers_of(engine, name) == []
    for kind in (engine.networks, engine.volumes):
        labelled = kind.list(filters={"label": LABEL_SESSION})
        assert not [item for item in labelled if item.attrs["Labels"][LABEL_SESSION].startswith(name)]


# Tries each address on a port; the attempt's bridge gateway (the host, on the attempt's own network)
# is computed inside the container from eth0's network.
CONNECT = """
import ipaddress, socket, subprocess, sys
port, addresses = int(sys.argv[1]), sys.argv[2:]
shown = subprocess.run(["ip", "-4", "-o", "addr", "show", "eth0"], capture_output=True, text=True).stdout
addresses.append(str(ipaddress.ip_interface(shown.split()[3]).network[1]))
for address in addresses:
    try:
        socket.create_connection((address, port), timeout=2).close()
        print(address, "open")
    except OSError as exc:
        print(address, "blocked", type(exc).__name__)
"""


@pytest.mark.parametrize("network_mode", ["public", "no-network"])
async def test_compose_services_cannot_reach_the_host(
    engine: docker.DockerClient, tmp_path: Path, network_mode: str
) -> None:
    """A service of this machine listening on every address is reachable from a plain bridge network
    the test makes (the control), and from none of the host's addresses, nor the attempt network's
    gateway, out of a compose task's main container; a sidecar still answers main by name."""
    server, port, stop = _listen_on_all_addresses()
    addresses = host_addresses()
    assert addresses, "the machine has no address but loopback"
    network = engine.networks.create(f"regatta-test-{port}", driver="bridge")
    try:
        control = engine.containers.run(
            BASE_IMAGE, ["python3", "-c", CONNECT, str(port)], network=network.name, remove=True
        )
        assert b" open" in control, control  # the test can see a reachable host
        task = write_task(
            tmp_path / "tasks",
            f"reach-{network_mode}",
            network_mode=network_mode,
            solve=f"python3 -c '{CONNECT}' {port} {' '.join(addresses)} > /logs/agent/connect.txt\n"
            "getent hosts peer > /logs/agent/peer.txt\n",
            test="echo 1 > /logs/verifier/reward.txt",
        )
        peer = {"image": BASE_IMAGE, "command": ["sleep", "infinity"]}
        compose = {"services": {"main": {"depends_on": ["peer"]}, "peer": peer}}
        (task / "environment" / "docker-compose.yaml").write_text(yaml.safe_dump(compose))
        result = await run_trial(task, "oracle", tmp_path)
    finally:
        network.remove()
        stop.set()
        server.close()
    assert rewards(result) == {"reward": 1.0}, result.exception_info
    agent = trial_dir(tmp_path, result) / "agent"
    lines = (agent / "connect.txt").read_text().splitlines()
    assert len(lines) == len(addresses) + 1, lines
    assert all(" blocked " in line for line in lines), lines
    assert (agent / "peer.txt").read_text().split()[1:] == ["peer"]
    assert _leftovers(engine, result) == {"containers": [], "networks": [], "volumes": [], "rules": []}


def _listen_on_all_addresses() -> tuple[socket.socket, int, threading.Event]:
    server = socket.create_server(("0.0.0.0", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                connection, _ = server.accept()
                connection.close()
            except OSError:
                continue

    threading.Thread(target=accept, daemon=True).start()
    return server, server.getsockname()[1], stop


HOLD_A_COMPOSE_ATTEMPT = """
import asyncio, sys
sys.path.insert(0, sys.argv[3])
from pathlib import Path
from tests.integration.container_support import started_environment

async def main():
    async with started_environment(Path(sys.argv[1]), Path(sys.argv[2])) as env:
        print(env.container_name, flush=True)
        await asyncio.sleep(3600)

asyncio.run(main())
"""


def test_the_sweep_removes_what_a_killed_executor_left(engine: docker.DockerClient, tmp_path: Path) -> None:
    """SIGKILL runs no clean-up: the next executor's sweep removes the attempt's sidecar, main,
    network, firewall rules and volumes."""
    task = write_task(tmp_path / "tasks", f"killed-{secrets.token_hex(4)}", network_mode="public")
    compose = {
        "services": {
            "main": {"depends_on": ["peer"], "volumes": ["data:/data"]},
            "peer": {"image": BASE_IMAGE, "command": ["sleep", "infinity"], "volumes": ["data:/data"]},
        },
        "volumes": {"data": None},
    }
    (task / "environment" / "docker-compose.yaml").write_text(yaml.safe_dump(compose))
    root = str(Path(__file__).resolve().parents[4])
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_A_COMPOSE_ATTEMPT, str(tmp_path / "held"), str(task), root],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "HARBOR_TELEMETRY": "0"},
    )
    owners = tmp_path / "held" / "state" / "owners"
    try:
        assert holder.stdout is not None
        name = holder.stdout.readline().strip()
        assert name, "the attempt never started"
        holder.kill()
        holder.wait(timeout=30)
        session = engine.containers.get(name).labels[LABEL_SESSION]
        left = {
            "containers": sorted(
                c.name
                for c in engine.containers.list(all=True, filters={"label": f"{LABEL_SESSION}={session}"})
            ),
            "networks": [
                n.name for n in engine.networks.list(filters={"label": f"{LABEL_SESSION}={session}"})
            ],
            "volumes": [v.name for v in engine.volumes.list(filters={"label": f"{LABEL_SESSION}={session}"})],
        }
        assert left["containers"] == sorted([name, f"{name}-peer"]), left
        assert left["networks"] == [f"{name}-net"] and f"{name}_data" in left["volumes"], left
        bridge = bridge_name(f"{name}-net")
        assert bridge in subprocess.run(["iptables", "-w", "-S"], capture_output=True, text=True).stdout

        assert sorted(janitor.sweep(engine, owners)) == left["containers"]
        # The log folders' volumes go with their container; the named one and the network stay for this.
        assert sorted(compose_run.sweep(engine, owners)) == sorted([f"{name}-net", f"{name}_data"])
        for kind in (engine.containers, engine.networks, engine.volumes):
            assert kind.list(filters={"label": f"{LABEL_SESSION}={session}"}) == []
        assert bridge not in subprocess.run(["iptables", "-w", "-S"], capture_output=True, text=True).stdout
    finally:
        holder.kill()
        holder.wait(timeout=30)
        janitor.sweep(engine, owners)
        compose_run.sweep(engine, owners)


@pytest.mark.parametrize("exit_code", [0, 3])
async def test_main_waits_for_a_service_to_complete(
    engine: docker.DockerClient, tmp_path: Path, exit_code: int
) -> None:
    """`service_completed_successfully`: main starts after the service exited 0 (what it left in a
    shared volume is there); a service that exits otherwise fails the attempt's start, naming it, and
    nothing is left."""
    task = write_task(
        tmp_path / "tasks",
        f"setup-{exit_code}",
        test='if [ "$(cat /data/prepared)" = "prepared" ]; then echo 1; else echo 0; fi \\\n'
        "  > /logs/verifier/reward.txt",
    )
    setup = {
        "image": BASE_IMAGE,
        "command": ["sh", "-c", f"sleep 2; echo prepared > /data/prepared; exit {exit_code}"],
        "volumes": ["data:/data"],
    }
    compose = {
        "services": {
            "main": {
                "depends_on": {"setup": {"condition": "service_completed_successfully"}},
                "volumes": ["data:/data"],
            },
            "setup": setup,
        },
        "volumes": {"data": None},
    }
    (task / "environment" / "docker-compose.yaml").write_text(yaml.safe_dump(compose))
    result = await run_trial(task, "oracle", tmp_path)
    if exit_code == 0:
        assert rewards(result) == {"reward": 1.0}, result.exception_info
    else:
        assert result.exception_info is not None and rewards(result) is None
        assert "service 'setup' exited with status 3" in result.exception_info.exception_message
    assert _leftovers(engine, result) == {"containers": [], "networks": [], "volumes": [], "rules": []}


async def test_harbors_per_service_operations_reach_the_sidecar(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    task = write_task(tmp_path / "tasks", "per-service")
    peer = {
        "image": BASE_IMAGE,
        "command": ["sh", "-c", "echo peer > /data/who; exec sleep infinity"],
        "user": "0",
        "volumes": ["data:/data"],
    }
    compose = {"services": {"main": {"depends_on": ["peer"]}, "peer": peer}, "volumes": {"data": None}}
    (task / "environment" / "docker-compose.yaml").write_text(yaml.safe_dump(compose))
    async with started_environment(tmp_path, task) as env:
        ran = await env.service_exec(
            "sleep 1; cat /data/who; hostname; echo $GIVEN", service="peer", env={"GIVEN": "x"}
        )
        assert (ran.return_code, (ran.stdout or "").split()) == (0, ["peer", "peer", "x"]), ran
        on_main = await env.service_exec("hostname", service="main")
        assert (on_main.stdout or "").strip() == "sandbox"
        with pytest.raises(ServiceOperationsUnsupportedError):
            await env.service_exec("true", service="ghost")
        await env.service_download_file("/data/who", tmp_path / "who.txt", service="peer")
        assert (tmp_path / "who.txt").read_text() == "peer\n"
        await env.service_download_dir("/data", tmp_path / "data", service="peer")
        assert (tmp_path / "data" / "who").read_text() == "peer\n"
        await env.stop_service("peer")
        assert engine.containers.get(f"{env.container_name}-peer").status == "exited"
