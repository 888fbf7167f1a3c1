"""Entrypoint of the executor: jobs from the shared JOBS durable, one per free slot, each kept in
progress while its attempt runs; stop notices on a core subscription; SIGTERM drains (worker.py)."""

from __future__ import annotations

import logging
import os
import sys
from functools import partial

from regatta_shared.bus import (
    CANCEL_SUBJECT_PREFIX,
    EXECUTOR_INBOX_PREFIX,
    EXECUTORS_DURABLE,
    JOB_SUBJECT,
    JOBS_STREAM,
)
from regatta_shared.runtime import Service
from regatta_shared.sealing import sealing_key
from regatta_shared.settings import Settings, load_settings

from .capacity import CapacityError, HostCapacity, host_capacity
from .environments import (
    EnvironmentNameError,
    ResolvedEnvironment,
    resolve_environment,
)
from .hosts import Hosts
from .task_ceilings import executor_ceilings
from .worker import JOB_RETRY_SEC, Executor, executor_id

log = logging.getLogger("regatta.executor")


async def setup(service: Service, environment: ResolvedEnvironment, capacity: HostCapacity) -> None:
    settings = service.settings
    hosts = Hosts(service.js, capacity, settings.capacity_wait_sec)
    executor = Executor(
        service.nc,
        settings.data_dir / "executor",
        settings.executor_slots,
        environment.choice,
        ack_wait=settings.job_ack_wait,
        retry_base_delay=settings.retry_base_delay,
        retry_max_delay=settings.retry_max_delay,
        infra_retries=settings.infra_retries,
        max_deliveries=settings.executor_max_deliveries,
        started_report_delay=settings.started_report_delay,
        sealing_key=sealing_key(settings),
        hosts=hosts,
    )
    await executor.open()
    # Announced until the stop has drained the consumer, then withdrawn (runtime: loops stop after it).
    service.loop("announce", hosts.announce)
    await service.subscribe(f"{CANCEL_SUBJECT_PREFIX}.*", executor.on_cancel)
    service.consume_each(
        JOBS_STREAM,
        EXECUTORS_DURABLE,
        [JOB_SUBJECT],
        executor.handle,
        ack_wait=settings.job_ack_wait,
        slots=settings.executor_slots,
        nak_delay=JOB_RETRY_SEC,
    )


def choose_environment(settings: Settings) -> ResolvedEnvironment:
    """Once per process, before any job is taken: a name that runs nothing ends the process here,
    saying which names are valid, rather than failing each attempt in turn."""
    try:
        resolved = resolve_environment(settings.executor_environment, settings.executor_environment_kwargs)
    except EnvironmentNameError as error:
        print(f"regatta executor: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    if resolved.choice.traits.takes_deployment_policy:
        # The deployment's image and outbound policy, unless the environment's kwargs name their own.
        kwargs = resolved.choice.kwargs
        kwargs.setdefault("local_images", [i.strip() for i in settings.local_images.split(",") if i.strip()])
        kwargs.setdefault("outbound_allow", settings.outbound_allow)
    log.info("environment: %s (%s)", resolved.choice.kind, resolved.reason)
    return resolved


def measure_capacity(settings: Settings, environment: ResolvedEnvironment) -> HostCapacity:
    """Once per process, like the environment: a declared capacity this host lacks ends it here."""
    try:
        choice = environment.choice
        ceilings = executor_ceilings(settings, choice)
        capacity = host_capacity(settings, ceilings, executor_id(), choice.kind, choice.traits.runs_on_host)
    except CapacityError as error:
        print(f"regatta executor: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    log.info(
        "capacity: %g CPUs, %d MiB memory, %d MiB storage",
        capacity.cpus,
        capacity.memory_mb,
        capacity.storage_mb,
    )
    return capacity


def main() -> None:
    os.environ.setdefault("HARBOR_TELEMETRY", "0")
    # litellm otherwise fetches its price table from the internet on first use (minutes offline).
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    settings = load_settings()
    # Executors may not declare streams (their NATS user cannot) and only their own inboxes are
    # theirs to subscribe to: the runtime waits for the streams and uses that prefix.
    # A stop drains: running attempts get the grace to finish, the rest go back to JOBS unreported.
    service = Service(
        "executor",
        settings,
        store=False,
        declare_streams=False,
        inbox_prefix=EXECUTOR_INBOX_PREFIX,
        drain_grace=settings.executor_grace_sec,
    )
    environment = choose_environment(settings)
    capacity = measure_capacity(settings, environment)
    service.run(partial(setup, environment=environment, capacity=capacity))
