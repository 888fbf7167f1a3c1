"""Where a job goes (issue 39): run here, hand back for a host that can hold it, or end the attempt
saying what no live host has; and what a host may declare it offers."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from regatta_executor.capacity import CapacityError, HostCapacity, host_capacity, measured_cpus, shortfall
from regatta_executor.placement import Placement, no_host_reason, place
from regatta_shared.ceilings import Ceilings
from regatta_shared.events import TaskResources
from regatta_shared.settings import Settings


def host(name: str, cpus: float, memory_mb: int = 8192, storage_mb: int = 10_000) -> HostCapacity:
    return HostCapacity(
        executor_id=name,
        host=name,
        environment="local",
        slots=2,
        cpus=cpus,
        memory_mb=memory_mb,
        storage_mb=storage_mb,
    )


SMALL, BIG = host("small-1", 2), host("big-1", 4, memory_mb=16_384)
FOUR_CPUS = TaskResources(cpus=4)


def test_a_task_that_fits_runs_here_whatever_the_others_announce() -> None:
    assert place(TaskResources(cpus=1, memory_mb=512), SMALL, [], 0, 0).action == "run"
    assert place(TaskResources(), SMALL, [BIG], 0, 0).action == "run", "a task asking nothing fits"
    assert place(TaskResources(cpus=2, memory_mb=8192), SMALL, [BIG], 0, 0).action == "run", "equal fits"


def test_a_task_too_big_here_is_handed_back_while_a_live_host_can_hold_it_however_long_it_waited() -> None:
    placed = place(FOUR_CPUS, SMALL, [SMALL, BIG], waited_sec=10_000, wait_limit_sec=60)
    assert placed.action == "hand_back"
    assert placed.reason == "this host lacks 4 CPUs (has 2); big-1 has it"


def test_with_no_host_able_it_waits_the_limit_then_is_refused_naming_what_lacks() -> None:
    assert place(FOUR_CPUS, SMALL, [SMALL], waited_sec=59, wait_limit_sec=60).action == "hand_back"
    refused = place(FOUR_CPUS, SMALL, [SMALL, host("small-2", 1)], waited_sec=60, wait_limit_sec=60)
    assert refused.action == "refuse"
    assert refused.reason == (
        "no executor host has 4 CPUs (largest: 2 CPUs; hosts: "
        "small-1 (2 CPUs, 8192 MiB memory, 10000 MiB storage); "
        "small-2 (1 CPU, 8192 MiB memory, 10000 MiB storage)); waited 60 s for one to start"
    )
    # This host counts even before its own announcement is read back.
    assert place(FOUR_CPUS, SMALL, [], 0, 0).action == "refuse"


def test_a_host_that_left_recently_is_waited_for_as_a_restart() -> None:
    """A big host restarting leaves a gap in the announcements; a job queued long ago must not be
    refused in it. Only a host that could hold the task counts."""
    placed = place(FOUR_CPUS, SMALL, [SMALL], waited_sec=10_000, wait_limit_sec=60, gone=[BIG])
    assert placed == Placement("hand_back", "this host lacks 4 CPUs (has 2); big-1 had it and left recently")
    assert place(FOUR_CPUS, SMALL, [SMALL], 10_000, 60, gone=[host("small-2", 3)]).action == "refuse"


def test_resources_spread_over_hosts_are_no_host_that_has_them_all() -> None:
    """One host has the CPUs, another the memory: neither can hold the task, and the reason says the
    two are wanted together."""
    asked = TaskResources(cpus=4, memory_mb=16_000)
    many_cpus, much_memory = host("cpus", 8, memory_mb=1024), host("memory", 1, memory_mb=65_536)
    refused = place(asked, SMALL, [many_cpus, much_memory], 0, 0)
    assert refused.action == "refuse"
    assert refused.reason.startswith(
        "no executor host has 4 CPUs and 16000 MiB of memory (largest: 8 CPUs, 65536 MiB of memory; "
    )
    # Only what no host has at all is named when something is missing everywhere.
    reason = no_host_reason(TaskResources(cpus=16, memory_mb=1024, storage_mb=50_000), [SMALL, BIG], 0)
    assert reason.startswith(
        "no executor host has 16 CPUs and 50000 MiB of storage (largest: 4 CPUs, 10000 MiB of storage; "
    )


def test_a_refusal_names_at_most_five_hosts() -> None:
    hosts = [host(f"h{i}", 1) for i in range(8)]
    reason = no_host_reason(FOUR_CPUS, hosts, 300)
    assert reason.count(" CPU, ") == 5 and "; 3 more)" in reason and "h7" not in reason


def test_shortfall_names_each_resource_and_treats_nan_as_too_much() -> None:
    assert shortfall(TaskResources(cpus=0.5, memory_mb=8192, storage_mb=10_000), SMALL) == []
    assert shortfall(TaskResources(cpus=2.5, memory_mb=9000, storage_mb=20_000), SMALL) == [
        "2.5 CPUs (has 2)",
        "9000 MiB of memory (has 8192)",
        "20000 MiB of storage (has 10000)",
    ]
    assert shortfall(TaskResources(cpus=float("nan")), BIG) == ["nan CPUs (has 4)"]


CEILINGS = Ceilings.from_settings(Settings(REGATTA_MAX_STORAGE_MB=4096))


def test_a_host_offers_what_it_measured_or_less_as_declared() -> None:
    measured = host_capacity(Settings(), CEILINGS, "e-1", "local", True, cpus=2, memory_mb=4000)
    assert (measured.cpus, measured.memory_mb, measured.storage_mb) == (2, 4000, 4096)
    declared = host_capacity(
        Settings(REGATTA_EXECUTOR_CPUS=1.5, REGATTA_EXECUTOR_MEMORY_MB=1000),
        CEILINGS,
        "e-1",
        "local",
        2,
        4000,
    )
    assert (declared.cpus, declared.memory_mb) == (1.5, 1000)


def test_a_host_declared_above_what_it_has_is_refused_naming_the_setting() -> None:
    with pytest.raises(
        CapacityError, match=r"^REGATTA_EXECUTOR_CPUS = 4 is more than this host has \(2 CPUs\)$"
    ):
        host_capacity(
            Settings(REGATTA_EXECUTOR_CPUS=4), CEILINGS, "e-1", "local", True, cpus=2, memory_mb=4000
        )
    with pytest.raises(
        CapacityError, match=r"REGATTA_EXECUTOR_MEMORY_MB = 5000 is more than .* \(4000 MiB\)"
    ):
        host_capacity(Settings(REGATTA_EXECUTOR_MEMORY_MB=5000), CEILINGS, "e-1", "local", True, 2, 4000)


def test_the_measured_cpus_are_those_this_process_may_use() -> None:
    assert measured_cpus() <= len(os.sched_getaffinity(0))
    pinned = subprocess.run(
        [
            "taskset",
            "-c",
            "0",
            sys.executable,
            "-c",
            "from regatta_executor.capacity import measured_cpus as m; print(m())",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert pinned.returncode == 0, pinned.stderr
    assert pinned.stdout.strip() == "1.0"


def test_an_executor_declared_above_its_host_exits_at_start_saying_so(tmp_path) -> None:
    cpus = len(os.sched_getaffinity(0))
    env = {
        **os.environ,
        "REGATTA_EXECUTOR_CPUS": str(cpus + 2),
        "REGATTA_EXECUTOR_ENVIRONMENT": "local",
        "REGATTA_DATA_DIR": str(tmp_path),
        "NATS_URL": "nats://127.0.0.1:1",
    }
    started = subprocess.run(
        [sys.executable, "-m", "regatta_executor"], env=env, capture_output=True, text=True, timeout=120
    )
    assert started.returncode == 2
    assert f"REGATTA_EXECUTOR_CPUS = {cpus + 2} is more than this host has ({cpus} CPUs)" in started.stderr


def test_an_executor_remembers_hosts_that_left_for_as_long_as_it_waits() -> None:
    """Hosts._gone feeds place(): hosts seen in an earlier read and absent from this one, within the
    wait limit; none with a limit of 0."""
    from regatta_executor.hosts import Hosts

    remembering = Hosts(None, SMALL, wait_limit_sec=600)  # type: ignore[arg-type]  # no bus needed here
    assert remembering._gone([SMALL, BIG]) == []
    assert remembering._gone([SMALL]) == [BIG]
    assert remembering._gone([SMALL, BIG]) == [], "back again"
    forgetting = Hosts(None, SMALL, wait_limit_sec=0)  # type: ignore[arg-type]
    forgetting._gone([BIG])
    assert forgetting._gone([]) == []
