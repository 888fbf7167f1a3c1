"""FastStream app of the executor: health, lifecycle; the worker pulls jobs one per free slot."""

from __future__ import annotations

import logging
import os
import sys

import nats
from regatta_shared.bus import EXECUTOR_INBOX_PREFIX
from regatta_shared.sealing import sealing_key
from regatta_shared.service import build_app, configure_logging, make_broker, run_app
from regatta_shared.settings import load_settings

from .environments import EnvironmentNameError, ResolvedEnvironment, resolve_environment
from .worker import Executor

log = logging.getLogger("regatta.executor")
settings = load_settings()
broker = make_broker(settings, inbox_prefix=EXECUTOR_INBOX_PREFIX)
executor: Executor | None = None
environment: ResolvedEnvironment | None = None


async def start_worker() -> None:
    global executor
    nc = await nats.connect(
        settings.nats_url,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.5,
        inbox_prefix=EXECUTOR_INBOX_PREFIX,  # the only inboxes its NATS user may subscribe to
    )
    assert environment is not None, "main() resolves the environment before the app starts"
    executor = Executor(
        nc,
        settings.data_dir / "executor",
        settings.executor_slots,
        environment.choice,
        ack_wait=settings.job_ack_wait,
        retry_base_delay=float(os.environ.get("REGATTA_RETRY_BASE_DELAY", "1.0")),
        started_report_delay=settings.started_report_delay,
        sealing_key=sealing_key(settings),
    )
    await executor.start()


async def stop_worker() -> None:
    if executor is not None:
        await executor.stop()


# Executors may not declare streams (their NATS user cannot): the worker waits for them instead.
app = build_app(
    broker, settings, after_startup=[start_worker], on_shutdown=[stop_worker], declare_streams=False
)


def choose_environment() -> ResolvedEnvironment:
    """Once per process, before any job is taken: a name that runs nothing ends the process here,
    saying which names are valid, rather than failing each attempt in turn."""
    try:
        resolved = resolve_environment(settings.executor_environment, settings.executor_environment_kwargs)
    except EnvironmentNameError as error:
        print(f"regatta executor: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    log.info("environment: %s (%s)", resolved.choice.kind, resolved.reason)
    return resolved


def main() -> None:
    global environment
    os.environ.setdefault("HARBOR_TELEMETRY", "0")
    # litellm otherwise fetches its price table from the internet on first use (minutes offline).
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    configure_logging("executor")
    environment = choose_environment()
    run_app(app, settings)
