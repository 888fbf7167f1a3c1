"""Issue 39: executors on several hosts, each with its own network namespace, PID namespace and Docker
engine, sharing only a 3-server NATS cluster (streams at R3) and Postgres (regatta.multihost). A real
container run goes through each fault: an executor host killed whole, a NATS server killed and brought
back, the gateway and the scheduler killed and restarted, a host cut off the bus for longer than the
job ack wait. Each time every attempt ends exactly once, none stays `running`, no container is left on
any engine, and the run's scores equal the fault-free run's."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from regatta_executor.container.engine import LABEL_MANAGED

from regatta.multihost.cluster import Cluster, sweep_stale
from regatta.multihost.hosts import DATA_ROOT, RUN_ROOT, ExecutorHost
from tests.conftest import _create_database, _drop_database, unavailable
from tests.e2e.conftest import Api
from tests.e2e.test_executor import add_folder, run_events
from tests.support.tasks import run_toml, write_task, write_tasks

pytestmark = pytest.mark.timeout(900)

ACK_WAIT = 6.0  # the job ack wait: a partition must outlast it
ATTEMPTS = 2
BENCHMARK = "multihost"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, postgres_admin_url: str) -> Iterator[Cluster]:
    if os.geteuid() != 0 or not all(shutil.which(tool) for tool in ("ip", "nsenter", "unshare", "dockerd")):
        unavailable("the multi-host cluster needs root, ip, nsenter, unshare and dockerd")
    database = _create_database(postgres_admin_url)
    made = Cluster(
        tmp_path_factory.mktemp("multihost"),
        database,
        env={
            "REGATTA_EXECUTOR_SLOTS": "2",
            "REGATTA_JOB_ACK_WAIT": str(ACK_WAIT),
            "REGATTA_EXECUTOR_GRACE_SEC": "1",
            "REGATTA_STARTED_REPORT_DELAY": "0",
        },
    )
    try:
        made.start(hosts=2)
        yield made
    finally:
        made.teardown()
        _drop_database(postgres_admin_url, database)
    assert not list(Path("/run/netns").glob(f"{made.name}-*")), "the hosts' namespaces are gone"
    assert not list(RUN_ROOT.glob(f"{made.name}*")) and not (DATA_ROOT / made.name).exists()


@pytest.fixture(scope="module")
def api(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    assert cluster.control is not None
    client = Api(cluster.control)
    tasks = write_tasks(tmp_path_factory.mktemp("tasks"), 3, prefix="pass", sleep=3)
    write_task(tasks, "fail-0", solve="sleep 3; echo nope > /app/out.txt")
    add_folder(client, tasks, BENCHMARK)
    yield client
    client.http.close()


def managed_containers(host: ExecutorHost) -> list[dict[str, Any]]:
    engine = host.engine()
    try:
        return engine.api.containers(all=True, filters={"label": LABEL_MANAGED})
    finally:
        engine.close()


def live_hosts(cluster: Cluster) -> list[ExecutorHost]:
    return [host for host in cluster.hosts.values() if host.alive()]


def outcome_of(api: Api, cluster: Cluster, run_id: str) -> dict[str, Any]:
    """What must equal across faults: each attempt's outcome and reward, the run's totals and scores.
    Asserts on the way what must hold of any run: every attempt finished exactly once, none running."""
    detail = api.wait_run(run_id, timeout=480)
    assert detail["benchmark_run"]["status"] == "finished", detail["benchmark_run"]
    assert cluster.control is not None
    events = run_events(cluster.control, run_id)
    finished = [data for kind, data in events if kind == "AttemptFinished"]
    counts = Counter(data["attempt_id"] for data in finished)
    assert len(counts) == 4 * ATTEMPTS and set(counts.values()) == {1}, counts
    attempts = api.get(f"/runs/{run_id}/attempts", limit=200)["attempts"]
    assert [a for a in attempts if a["status"] in ("running", "pending", "queued")] == []
    scored = [data for kind, data in events if kind == "RunScored" and data.get("final")]
    return {
        "attempts": sorted(
            (d["task"], d["attempt_index"], d["outcome"], d["primary_reward"]) for d in finished
        ),
        "totals": {k: detail["totals"][k] for k in ("passed", "failed", "errored")},
        "scores": [_scores(agent) for agent in scored[-1]["agents"]] if scored else None,
        "hosts": Counter(d["executor_id"].rsplit("-", 1)[0] for d in finished),
        "redelivered": {
            d["attempt_id"] for kind, d in events if kind == "AttemptStarted" and d["delivery"] > 1
        },
    }


# A run's scores, without what depends on the clock (durations) rather than on outcomes.
SCORE_FIELDS = ("pass_at_1", "pass_at_k", "k", "categories", "task_counts", "passed", "failed", "errored")


def _scores(agent: dict[str, Any]) -> dict[str, Any]:
    return {key: agent[key] for key in SCORE_FIELDS}


def no_container_left(api: Api, cluster: Cluster) -> None:
    """Every live engine ends with no attempt container (a redelivered copy may still be removing its
    own when the run finishes, so this waits)."""
    api.wait_for(
        lambda: all(managed_containers(h) == [] for h in live_hosts(cluster)), timeout=120, every=0.5
    )


def finished_count(cluster: Cluster, run_id: str) -> int:
    assert cluster.control is not None
    return sum(kind == "AttemptFinished" for kind, _ in run_events(cluster.control, run_id))


def start_run(api: Api) -> str:
    return api.submit_toml(run_toml(BENCHMARK, attempts=ATTEMPTS, concurrency=4))["id"]


def wait_busy(api: Api, host: ExecutorHost) -> list[dict[str, Any]]:
    """The host runs attempt containers (the fault lands mid-attempt)."""
    return api.wait_for(lambda: managed_containers(host), timeout=240, every=0.2)


@pytest.fixture(scope="module")
def baseline(api: Api, cluster: Cluster) -> dict[str, Any]:
    run_id = start_run(api)
    result = outcome_of(api, cluster, run_id)
    no_container_left(api, cluster)
    return result


def test_a_run_spreads_over_two_hosts_with_their_own_engines(baseline, cluster) -> None:
    assert baseline["totals"] == {"passed": 3 * ATTEMPTS, "failed": ATTEMPTS, "errored": 0}
    assert set(baseline["hosts"]) == {h.name for h in cluster.hosts.values()}, baseline["hosts"]
    for host in cluster.hosts.values():
        engine = host.engine()
        try:
            info = engine.info()
            built = [tag for image in engine.images.list() for tag in image.tags if "debian" not in tag]
        finally:
            engine.close()
        assert info["DockerRootDir"].startswith(str(host.data_root)), info["DockerRootDir"]
        assert any("name=userns" in option for option in info["SecurityOptions"])
        # The host built the task images it ran: none was assumed present.
        assert any(not tag.startswith("regatta-test-base") for tag in built), built


def forwarders_of(host: ExecutorHost) -> list[int]:
    """The DNS forwarders (dnsmasq) running in the host's PID namespace with their pid file in the host's
    own network folder (REGATTA_NETWORK_RUN_DIR)."""
    flag = f"--pid-file={host.run_dir / 'network'}/".encode()
    found = []
    for pid in host.namespace_pids():
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(arg.startswith(flag) for arg in argv):
            found.append(pid)
    return found


def test_each_host_runs_its_own_sandbox_network_and_dns_forwarder(api, cluster, tmp_path) -> None:
    """`public` tasks on both hosts at once: each host's executor sets up its sandbox bridge, firewall
    and DNS forwarder in its own namespace, locked and recorded in its own folder. With one /run shared
    by the hosts, they overwrote each other's forwarder pid file, a host no longer recognised its own
    running forwarder, and its attempts errored on "Address already in use" starting another."""
    tasks = write_tasks(tmp_path / "public", 4, prefix="net", sleep=4, network="public")
    add_folder(api, tasks, "multihost-public")
    run_id = api.submit_toml(run_toml("multihost-public", attempts=1, concurrency=4))["id"]
    detail = api.wait_run(run_id, timeout=300)
    assert detail["benchmark_run"]["status"] == "finished", detail["benchmark_run"]
    assert detail["totals"]["passed"] == 4, api.artifact_texts(run_id)
    assert cluster.control is not None
    ran = {
        d["executor_id"].rsplit("-", 1)[0]
        for kind, d in run_events(cluster.control, run_id)
        if kind == "AttemptFinished"
    }
    hosts = [h for h in live_hosts(cluster) if h.name in ran]
    assert len(hosts) == 2, ran
    for host in hosts:
        assert forwarders_of(host), f"{host.name} runs its own forwarder, recorded in its own folder"
    no_container_left(api, cluster)


def compare(baseline: dict[str, Any], result: dict[str, Any]) -> None:
    for key in ("attempts", "totals", "scores"):
        assert result[key] == baseline[key], key


def test_a_host_killed_whole_mid_run_is_not_needed_back(baseline, api, cluster) -> None:
    victim = live_hosts(cluster)[0]
    run_id = start_run(api)
    wait_busy(api, victim)
    victim.kill()
    assert victim.namespace_pids() == [], "executor, engine and containers died with the host"
    result = outcome_of(api, cluster, run_id)
    compare(baseline, result)
    assert result["redelivered"], "the dead host's attempts ran again on the other"
    no_container_left(api, cluster)

    # Should the machine come back after all (same disk), its engine still lists the killed attempts'
    # containers; its executor's janitor removes them (their owner's lock is free) at its first attempt.
    victim.start()
    victim.wait_ready()
    assert managed_containers(victim), "the killed attempts' containers are still recorded"
    compare(baseline, outcome_of(api, cluster, start_run(api)))
    no_container_left(api, cluster)


def test_a_nats_server_killed_mid_run_and_brought_back(baseline, api, cluster) -> None:
    assert cluster.nats is not None
    run_id = start_run(api)
    wait_busy(api, live_hosts(cluster)[0])
    assert cluster.control is not None
    finished_before = finished_count(cluster, run_id)
    cluster.nats.kill(0)
    # The run goes on with two servers of three: attempts keep finishing while the third is down.
    api.wait_for(lambda: finished_count(cluster, run_id) > finished_before, timeout=120)
    cluster.nats.start(0)
    result = outcome_of(api, cluster, run_id)
    compare(baseline, result)
    no_container_left(api, cluster)
    cluster.nats.wait_ready()


def test_gateway_and_scheduler_killed_mid_run_and_restarted(baseline, api, cluster) -> None:
    control = cluster.control
    assert control is not None
    run_id = start_run(api)
    wait_busy(api, live_hosts(cluster)[0])
    control.kill("gateway", signal.SIGKILL)
    control.kill("run-scheduler", signal.SIGKILL)
    control.restart("run-scheduler")
    control.restart("gateway")
    control.wait_ready()
    result = outcome_of(api, cluster, run_id)
    compare(baseline, result)
    no_container_left(api, cluster)


def test_a_host_cut_off_the_bus_past_the_ack_wait_then_healed(baseline, api, cluster) -> None:
    assert cluster.network is not None
    victim = live_hosts(cluster)[0]
    run_id = start_run(api)
    held = {c["Id"] for c in wait_busy(api, victim)}
    cluster.network.partition(victim.index)
    cut_at = time.monotonic()
    try:
        # Its jobs are redelivered to the other host once their ack wait passes without a heartbeat.
        others = [h for h in live_hosts(cluster) if h is not victim]
        api.wait_for(lambda: any(managed_containers(h) for h in others), timeout=120, every=0.2)
        cut_until = cut_at + ACK_WAIT * 2
        api.wait_for(lambda: time.monotonic() >= cut_until, timeout=ACK_WAIT * 3)
    finally:
        cluster.network.heal(victim.index)
    result = outcome_of(api, cluster, run_id)
    compare(baseline, result)
    assert result["redelivered"], "the cut-off host's jobs went to the other host after the ack wait"
    no_container_left(api, cluster)
    assert not held & {c["Id"] for c in managed_containers(victim)}
    # Healed, the host takes jobs again: the next run spreads over both hosts.
    again = outcome_of(api, cluster, start_run(api))
    compare(baseline, again)
    assert set(again["hosts"]) == {h.name for h in live_hosts(cluster)}, again["hosts"]


def test_a_cluster_whose_process_was_killed_leaves_nothing_behind(postgres_url, tmp_path) -> None:
    """The operator's `python -m regatta.multihost`, SIGKILLed once it runs (no teardown at all): its
    NATS servers and its host (executor, engine, containers) end with it, and the next cluster's start
    (`sweep_stale`) removes its namespace, veth, bridge, engine data-root and run folder."""
    process = subprocess.Popen(
        [sys.executable, "-m", "regatta.multihost", "--database-url", postgres_url, "--hosts", "1",
         "--root", str(tmp_path / "cluster")],
        stdout=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        lines = []
        while not (lines and lines[-1].startswith("Ctrl-C")):
            line = process.stdout.readline()
            assert line, f"the cluster exited before it ran: {lines}"
            lines.append(line)
        name = next(line.split()[0] for line in lines if "-host-1" in line).rsplit("-host-", 1)[0]
        marks = (name, str(tmp_path / "cluster"))
        assert _processes_of(marks), "the host's and the NATS servers' processes run"
    finally:
        process.kill()
        process.wait(timeout=30)
    deadline = time.monotonic() + 60
    while _processes_of(marks):
        assert time.monotonic() < deadline, f"still running: {_processes_of(marks)}"
        time.sleep(0.2)
    assert Path(f"/run/netns/{name}-1").exists(), "nothing removed it yet"
    sweep_stale()
    assert not Path(f"/run/netns/{name}-1").exists()
    assert not Path(f"/sys/class/net/{name}b").exists()
    assert not (RUN_ROOT / name).exists() and not (DATA_ROOT / name).exists()
    assert not list(RUN_ROOT.glob(f"{name}.*")), "nor dockerd's remapped copies of its run folder"


def _processes_of(marks: tuple[str, ...]) -> dict[int, str]:
    """Processes whose command line names the cluster (its name or its folder)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and any(mark in (command := _cmdline(int(entry.name))) for mark in marks):
            found[int(entry.name)] = command
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
